// Package docs holds gpulab's documentation as Markdown pages. Its test
// keeps them from drifting from the code: every relative link resolves,
// every make target named exists, the CLI reference matches
// gpulab-conformance -h, and the install commands keep their safe forms.
package docs
