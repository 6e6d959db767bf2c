package kubernetes

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// reconcilePolicies makes the pool's NetworkPolicies (gate.go) what its
// settings say, once per runner start. With networkPolicy: the pool's
// default deny exists; every Service of a live attempt has its policy (a
// Service made by a gpufleet that made none, or whose runner stopped
// between the two creates); no attempt's policy outlives its Service and
// attempt. Without: the pool has none. A cluster that refuses (no RBAC
// for networkpolicies) is logged once, not retried; an error means try
// again later.
func (r *runner) reconcilePolicies(ctx context.Context) error {
	ns, pool := r.c.opts.Settings.Namespace, r.c.opts.Pool
	api := r.c.opts.Client.NetworkingV1().NetworkPolicies(ns)
	list, err := api.List(ctx, metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + pool})
	if err != nil {
		return r.policyError("listing the pool's NetworkPolicies", err)
	}
	if !policiesOn(r.c.opts.Settings) {
		for i := range list.Items {
			if np := &list.Items[i]; r.c.ours(np) {
				if err := api.Delete(ctx, np.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					return r.policyError("deleting NetworkPolicy "+np.Name+" (the pool's networkPolicy is false)", err)
				}
			}
		}
		return nil
	}
	if _, err := api.Create(ctx, poolPolicy(pool, ns), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return r.policyError("creating the pool's default deny "+poolPolicyName(pool), err)
	}
	have := map[string]bool{}
	for i := range list.Items {
		np := &list.Items[i]
		attempt := np.Annotations[AnnotationAttemptID]
		if !r.c.ours(np) || attempt == "" {
			continue
		}
		have[np.Name] = true
		if _, err := r.c.services.Services(ns).Get(np.Name); err == nil || r.attemptLive(attempt) {
			continue
		}
		if err := api.Delete(ctx, np.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return r.policyError("deleting NetworkPolicy "+np.Name+" whose Service is gone", err)
		}
	}
	svcs, err := r.c.services.Services(ns).List(everything)
	if err != nil {
		return nil // a lister only fails on a bad selector
	}
	for _, svc := range svcs {
		attempt := svc.Annotations[AnnotationAttemptID]
		if !r.c.ours(svc) || attempt == "" || have[svc.Name] || !r.attemptLive(attempt) {
			continue
		}
		if _, err := api.Create(ctx, policyFor(svc), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return r.policyError("creating the NetworkPolicy of Service "+svc.Name, err)
		}
	}
	return nil
}

// policyError is nil, after logging, for an error that asking again will
// not cure (RBAC, a missing namespace), else err, to retry.
func (r *runner) policyError(what string, err error) error {
	if permanent(err) {
		r.log.Error("the pool's NetworkPolicies are not as its settings say: grant gpufleet networkpolicies (deploy/kubernetes/rbac.yaml) or set kubernetes.networkPolicy: false",
			"doing", what, "err", err)
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

// attemptLive reports whether a Job of attempt runs (not finished, not
// being deleted) or is wanted.
func (r *runner) attemptLive(attempt string) bool {
	for _, obj := range r.c.jobsOfAttempt(attempt) {
		if j := obj.(*batchv1.Job); j.DeletionTimestamp == nil && !finished(j) {
			return true
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.wants {
		if w.attempt == attempt && !w.delete {
			return true
		}
	}
	return false
}
