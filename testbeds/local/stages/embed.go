// Package stages holds gpulab's own kwok Stages, which the local testbed
// loads beside kwok's: they finish a Job's pods with success, or with
// failure when the pod is labelled gpulab.io/simulate-result=fail.
package stages

import _ "embed"

// PodSucceed completes a Job's running pod with exit code 0.
//
//go:embed pod-succeed.yaml
var PodSucceed []byte

// PodFail fails a Job's running pod labelled to fail, with exit code 1.
//
//go:embed pod-fail.yaml
var PodFail []byte
