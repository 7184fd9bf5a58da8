// Package cli is the gpulab-agent command line: flag parsing and validation,
// wiring of the agent (or the testbed fleet simulator) to the API server and
// the metrics endpoint, and the one-shot inventory command.
package cli
