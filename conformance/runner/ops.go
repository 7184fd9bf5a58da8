package runner

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/conformance/rbac"
)

// Submit creates the shared objects that are not there yet (an existing
// one is left as it is, whoever made it) and the run's Job, which must
// not exist. It returns the shared objects it created.
func Submit(ctx context.Context, c client.Client, o Options) ([]string, error) {
	o = o.withDefaults()
	if o.Image == "" || o.RunID == "" {
		return nil, errors.New("submit: an image and a run id are required")
	}
	var created []string
	for _, obj := range Shared(o.Namespace) {
		err := c.Create(ctx, obj)
		switch {
		case apierrors.IsAlreadyExists(err):
			if err := bindsRunner(ctx, c, obj, o.Namespace); err != nil {
				return created, err
			}
		case err != nil:
			return created, fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		default:
			created = append(created, kindName(obj))
		}
	}
	if err := c.Create(ctx, Job(o)); err != nil {
		return created, fmt.Errorf("creating the runner Job %s/%s: %w", o.Namespace, JobName(o.RunID), err)
	}
	return created, nil
}

// bindsRunner checks that an existing ClusterRoleBinding of the runner's
// name binds the runner's ServiceAccount: one made for another namespace
// (the chart's runner binds its release's) would leave this one unbound,
// and the run would fail at preflight. Other objects are used as found.
func bindsRunner(ctx context.Context, c client.Client, obj client.Object, namespace string) error {
	if _, ok := obj.(*rbacv1.ClusterRoleBinding); !ok {
		return nil
	}
	var crb rbacv1.ClusterRoleBinding
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), &crb); err != nil {
		return err
	}
	var bound []string
	for _, s := range crb.Subjects {
		if s.Kind == rbacv1.ServiceAccountKind && s.Name == rbac.Name && s.Namespace == namespace {
			return nil
		}
		bound = append(bound, s.Kind+" "+s.Namespace+"/"+s.Name)
	}
	return fmt.Errorf("ClusterRoleBinding %s already exists and binds %v, not ServiceAccount %s/%s: "+
		"give --runner-namespace the namespace it binds (the chart's runner: its release namespace)", crb.Name, bound, namespace, rbac.Name)
}

func kindName(obj client.Object) string {
	kind := strings.TrimPrefix(fmt.Sprintf("%T", obj), "*v1.")
	if obj.GetNamespace() != "" {
		return kind + " " + obj.GetNamespace() + "/" + obj.GetName()
	}
	return kind + " " + obj.GetName()
}

// State is a submitted run as the cluster shows it.
type State struct {
	// Phase is the Job's: Pending (no pod running yet), Running,
	// Finished (the run ended, its pod exited), or Unknown.
	Phase string
	// ExitCode is the suite's exit code once Finished (0 passed, 1 failed,
	// 3 partial), -1 before.
	ExitCode int32
	// Verdict is the stored results' verdict, "" before they are stored.
	Verdict string
	// Pod is the runner pod's name, "" before it exists.
	Pod string
	// Reason says why the pod is not running (an image pull, a
	// scheduling failure), when it says.
	Reason string
}

// Status reads the run's Job, pod and results ConfigMap.
func Status(ctx context.Context, c client.Client, namespace, runID string) (State, error) {
	st := State{Phase: "Unknown", ExitCode: -1}
	var job batchv1.Job
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: JobName(runID)}, &job); err != nil {
		return st, fmt.Errorf("the runner Job of run %s: %w", runID, err)
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{RunnerLabel: runID}); err != nil {
		return st, err
	}
	st.Phase = "Pending"
	for i := range pods.Items {
		p := &pods.Items[i]
		st.Pod = p.Name
		for _, cs := range p.Status.ContainerStatuses {
			switch {
			case cs.State.Terminated != nil:
				st.Phase, st.ExitCode, st.Reason = "Finished", cs.State.Terminated.ExitCode, cs.State.Terminated.Reason
			case cs.State.Running != nil:
				st.Phase = "Running"
			case cs.State.Waiting != nil:
				st.Reason = cs.State.Waiting.Reason + ": " + cs.State.Waiting.Message
			}
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
				st.Reason = cond.Reason + ": " + cond.Message
			}
		}
	}
	var cm corev1.ConfigMap
	switch err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ConfigMapName(runID)}, &cm); {
	case err == nil:
		st.Verdict = cm.Annotations[VerdictAnnotation]
	case !apierrors.IsNotFound(err):
		return st, err
	}
	return st, nil
}

// Follow copies the runner pod's log to w from its start until the run
// ends, and returns its final State. It waits for the pod to start first,
// failing when it cannot (an image that cannot be pulled, no room).
func Follow(ctx context.Context, c client.Client, cs kubernetes.Interface, namespace, runID string, w io.Writer) (State, error) {
	var st State
	var err error
	for {
		if st, err = Status(ctx, c, namespace, runID); err != nil {
			return st, err
		}
		if st.Phase == "Running" || st.Phase == "Finished" {
			break
		}
		if strings.HasPrefix(st.Reason, "ErrImagePull") || strings.HasPrefix(st.Reason, "ImagePullBackOff") || strings.HasPrefix(st.Reason, "InvalidImageName") {
			return st, fmt.Errorf("the runner pod %s cannot start: %s", st.Pod, st.Reason)
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("waiting for the runner pod to start (%s): %w", st.Reason, ctx.Err())
		case <-time.After(time.Second):
		}
	}
	stream, err := cs.CoreV1().Pods(namespace).GetLogs(st.Pod, &corev1.PodLogOptions{Follow: true}).Stream(ctx)
	if err != nil {
		return st, fmt.Errorf("following the runner pod %s: %w", st.Pod, err)
	}
	_, copyErr := io.Copy(w, bufio.NewReader(stream))
	_ = stream.Close()
	// The log ends when the container does; its exit code and the stored
	// verdict follow within moments.
	deadline := time.Now().Add(time.Minute)
	for {
		if st, err = Status(ctx, c, namespace, runID); err != nil {
			return st, err
		}
		if st.Phase == "Finished" && st.Verdict != "" || time.Now().After(deadline) {
			return st, copyErr
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// maxStored is what a ConfigMap holds with room to spare (the API server's
// limit is 1 MiB for the whole object).
const maxStored = 900 << 10

// Store packs dir's files (not its subfolders' logs past the size limit)
// into the run's ConfigMap, with the verdict as an annotation. A run too
// large for one is stored without its logs, and says so.
func Store(ctx context.Context, c client.Client, namespace, name, runID, verdict, dir string) error {
	data, err := pack(dir, true)
	if err == nil && len(data) > maxStored {
		data, err = pack(dir, false)
	}
	if err != nil {
		return err
	}
	if len(data) > maxStored {
		return fmt.Errorf("the results of run %s are %d KiB packed, more than a ConfigMap holds", runID, len(data)>>10)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{RunnerLabel: runID},
			Annotations: map[string]string{VerdictAnnotation: verdict}},
		BinaryData: map[string][]byte{ResultsKey: data},
	}
	err = c.Create(ctx, cm)
	if apierrors.IsAlreadyExists(err) {
		var old corev1.ConfigMap
		if err = c.Get(ctx, client.ObjectKeyFromObject(cm), &old); err == nil {
			cm.ResourceVersion = old.ResourceVersion
			err = c.Update(ctx, cm)
		}
	}
	if err != nil {
		return fmt.Errorf("storing the results in ConfigMap %s/%s: %w", namespace, name, err)
	}
	return nil
}

// pack is dir as a gzipped tar; withSubdirs includes the logs folders.
func pack(dir string, withSubdirs bool) ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		if d.IsDir() {
			if !withSubdirs {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(data))}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("packing %s: %w", dir, err)
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Retrieve unpacks the run's stored results into dir and returns the
// files written. A name that would leave dir is refused.
func Retrieve(ctx context.Context, c client.Client, namespace, runID, dir string) ([]string, error) {
	var cm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ConfigMapName(runID)}, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("run %s has stored no results yet (gpulab-conformance status --run-id %s): %w", runID, runID, err)
		}
		return nil, err
	}
	gz, err := gzip.NewReader(bytes.NewReader(cm.BinaryData[ResultsKey]))
	if err != nil {
		return nil, fmt.Errorf("the results of run %s: %w", runID, err)
	}
	tr := tar.NewReader(gz)
	var files []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return files, fmt.Errorf("the results of run %s: %w", runID, err)
		}
		rel := filepath.Clean(filepath.FromSlash(h.Name))
		if !filepath.IsLocal(rel) || h.Typeflag != tar.TypeReg {
			return files, fmt.Errorf("the results of run %s hold %q, which is not a file inside %s", runID, h.Name, dir)
		}
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return files, err
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			return files, err
		}
		_, err = io.Copy(f, io.LimitReader(tr, h.Size))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return files, err
		}
		files = append(files, rel)
	}
}

// Cleanup deletes the run's Job (and its pod) and results ConfigMap, and,
// once no other run's Job is left in the namespace, the shared objects
// Submit created (never ones it found). It returns what it deleted.
func Cleanup(ctx context.Context, c client.Client, namespace, runID string) ([]string, error) {
	var deleted []string
	var errs []error
	background := client.PropagationPolicy(metav1.DeletePropagationBackground)
	for _, obj := range []client.Object{
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: JobName(runID)}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: ConfigMapName(runID)}},
	} {
		switch err := c.Delete(ctx, obj, background); {
		case err == nil:
			deleted = append(deleted, kindName(obj))
		case !apierrors.IsNotFound(err):
			errs = append(errs, err)
		}
	}
	var jobs batchv1.JobList
	if err := c.List(ctx, &jobs, client.InNamespace(namespace), client.HasLabels{RunnerLabel}); err != nil && !apierrors.IsNotFound(err) {
		return deleted, errors.Join(append(errs, err)...)
	}
	others := 0
	for _, j := range jobs.Items {
		if j.Labels[RunnerLabel] != runID && j.DeletionTimestamp == nil {
			others++
		}
	}
	if others > 0 {
		return deleted, errors.Join(errs...)
	}
	shared, err := CleanupShared(ctx, c, namespace)
	return append(deleted, shared...), errors.Join(append(errs, err)...)
}

// CleanupShared deletes the shared objects Submit created in namespace
// (those carrying ManagedBy; never ones it found there). Callers make sure
// no run still uses them.
func CleanupShared(ctx context.Context, c client.Client, namespace string) ([]string, error) {
	var deleted []string
	var errs []error
	background := client.PropagationPolicy(metav1.DeletePropagationBackground)
	shared := Shared(namespace)
	for i := len(shared) - 1; i >= 0; i-- {
		obj := shared[i]
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			if !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
			continue
		}
		if obj.GetLabels()[ManagedByLabel] != ManagedBy {
			continue // someone else's: a reviewed install stays
		}
		if err := c.Delete(ctx, obj, background); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
			continue
		}
		deleted = append(deleted, kindName(obj))
	}
	return deleted, errors.Join(errs...)
}
