package kubernetes

import (
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/podsync"
)

// Checkpoints and datasets in a pod (docs/kubernetes.md, package podsync):
// the pool's syncImage runs an init container that fetches the datasets,
// one that restores the latest checkpoint, and a native sidecar that
// uploads checkpoints while the job runs and once more when it ends. They
// read the attempt's podsync.Spec (credentials, data key) from the Job's
// Secret; the job's container references no key of it.

// Names of the sync containers and volumes.
const (
	ContainerData       = "gpufleet-data"
	ContainerRestore    = "gpufleet-restore"
	ContainerCheckpoint = "gpufleet-checkpoint"
	volumeData          = "gpufleet-data"
	volumeCheckpoint    = "gpufleet-checkpoint"
	// syncUID runs the sync containers, not as root: the volumes are the
	// pod's own emptyDirs, writable by any user.
	syncUID = 65532
)

// folderData says why a dataset of spec cannot be read in a pod (its
// storage is a folder on the server's or the nodes' filesystem), or "".
func folderData(spec agentapi.ReplicaSpec) string {
	for _, d := range spec.Data {
		if d.Error == "" && d.Storage.Path != "" && d.Storage.S3 == nil {
			return d.Field + ".source " + d.Source + " is a folder storage, which Kubernetes pods do not see: run the job on agent nodes or declare s3 storage"
		}
	}
	return ""
}

// withSync adds the sync containers of ps to pod, whose first container
// is the job's, and shows that container the volumes: the checkpoint
// folder read-write at podsync.CheckpointDir (GPUFLEET_CHECKPOINT_DIR), each
// dataset read-only at its path under its working directory, else under
// podsync.DataDir (GPUFLEET_DATA_DIR). job names the Secret.
func (p *jobPlan) withSync(pod *corev1.PodSpec, ps *podsync.Spec, job string) {
	main := &pod.Containers[0]
	env := []corev1.EnvVar{{Name: podsync.EnvSpec, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: job}, Key: podsync.EnvSpec}}}}
	sync := func(name, verb string, vol corev1.VolumeMount) corev1.Container {
		return corev1.Container{
			Name: name, Image: p.settings.SyncImage, Command: []string{"gpufleet", "pod", verb},
			Env: slices.Clone(env), VolumeMounts: []corev1.VolumeMount{vol},
			// A failure's message (the command's last log lines) is what
			// the runner reports as the replica's end.
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			SecurityContext:          sidecarSecurity(),
		}
	}
	emptyDir := func(name string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	}
	if len(ps.Data) > 0 {
		pod.Volumes = append(pod.Volumes, emptyDir(volumeData))
		pod.InitContainers = append(pod.InitContainers, sync(ContainerData, "fetch-data", corev1.VolumeMount{Name: volumeData, MountPath: podsync.DataDir}))
		root := main.WorkingDir
		if root == "" {
			root = podsync.DataDir
		}
		for i, d := range ps.Data {
			main.VolumeMounts = append(main.VolumeMounts, corev1.VolumeMount{Name: volumeData, MountPath: path.Join(root, d.Path), SubPath: podsync.DataSubPath(i), ReadOnly: true})
		}
		main.Env = setEnv(main.Env, corev1.EnvVar{Name: "GPUFLEET_DATA_DIR", Value: root})
	}
	if ps.Checkpoint != nil {
		mount := corev1.VolumeMount{Name: volumeCheckpoint, MountPath: podsync.CheckpointDir}
		pod.Volumes = append(pod.Volumes, emptyDir(volumeCheckpoint))
		sidecar := sync(ContainerCheckpoint, "sync", mount)
		sidecar.RestartPolicy = new(corev1.ContainerRestartPolicyAlways)
		// Only rank 0 uploads; a gang's Job gives each pod its rank.
		if i := slices.IndexFunc(main.Env, func(e corev1.EnvVar) bool { return e.Name == "RANK" }); i >= 0 {
			sidecar.Env = setEnv(sidecar.Env, main.Env[i])
		}
		pod.InitContainers = append(pod.InitContainers, sync(ContainerRestore, "restore", mount), sidecar)
		main.VolumeMounts = append(main.VolumeMounts, mount)
		main.Env = setEnv(main.Env, corev1.EnvVar{Name: "GPUFLEET_CHECKPOINT_DIR", Value: podsync.CheckpointDir})
	}
}

// sidecarSecurity is the security context of gpufleet's containers in a
// pod (sync and gate): user syncUID, no privilege escalation, no
// capabilities, a read-only root.
func sidecarSecurity() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsUser: new(int64(syncUID)), RunAsGroup: new(int64(syncUID)), RunAsNonRoot: new(true),
		AllowPrivilegeEscalation: new(false), ReadOnlyRootFilesystem: new(true),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// setEnv sets v in env (sorted by name), replacing a variable of its name.
func setEnv(env []corev1.EnvVar, v corev1.EnvVar) []corev1.EnvVar {
	env = slices.DeleteFunc(slices.Clone(env), func(e corev1.EnvVar) bool { return e.Name == v.Name })
	env = append(env, v)
	slices.SortFunc(env, func(a, b corev1.EnvVar) int { return strings.Compare(a.Name, b.Name) })
	return env
}
