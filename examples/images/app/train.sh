#!/bin/sh
# A toy training loop: resumes from $GPUFLEET_CHECKPOINT_DIR/LATEST, saves a
# checkpoint every step, and saves one more on SIGTERM (the checkpoint signal).
ckpt=${GPUFLEET_CHECKPOINT_DIR:?}
step=0
[ -f "$ckpt/LATEST" ] && step=$(sed -n 's/^step=//p' "$ckpt/LATEST")
echo "framework: $(cat /opt/framework/VERSION); resuming at step $step; GPUs: ${CUDA_VISIBLE_DEVICES:-none}"
save() { echo "step=$step" > "$ckpt/LATEST.tmp" && mv "$ckpt/LATEST.tmp" "$ckpt/LATEST"; }
trap 'save; echo "checkpoint at step $step on SIGTERM"; exit 0' TERM
steps=${STEPS:-5}
while [ "$step" -lt "$steps" ]; do
  step=$((step + 1)); save; echo "step $step"
  sleep "${STEP_SECONDS:-1}" & wait $!
done
echo "trained $step steps"
