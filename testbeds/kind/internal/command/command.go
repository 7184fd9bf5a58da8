// Package command runs the external programs the kind testbed still needs
// (docker, debootstrap, go) through gexe, with exact arguments (no shell
// parsing) and the output's tail in the error, so a failed step says why.
package command

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/vladimirvivien/gexe/exec"
)

// Cmd is one program run.
type Cmd struct {
	// Name and Args are the program and its arguments, passed as they are.
	Name string
	Args []string
	// Dir is the working directory. Defaults to the current one.
	Dir string
	// Env is added to the process's environment.
	Env []string
	// Stdin feeds the program. Defaults to none.
	Stdin io.Reader
	// Log also receives the output as it comes. Defaults to none.
	Log io.Writer
}

// Output runs the program and returns its standard output; on failure the
// error carries the last lines of its standard error and output.
func Output(ctx context.Context, c Cmd) (string, error) {
	proc := exec.NewProcWithContext(ctx, c.Name)
	if err := proc.Err(); err != nil {
		return "", fmt.Errorf("%s: %w", c.Name, err)
	}
	cmd := proc.Command()
	cmd.Args = append([]string{c.Name}, c.Args...)
	cmd.Dir = c.Dir
	if len(c.Env) > 0 {
		cmd.Env = append(os.Environ(), c.Env...)
	}
	cmd.Stdin = c.Stdin
	var stdout, stderr bytes.Buffer
	log := c.Log
	if log == nil {
		log = io.Discard
	}
	cmd.Stdout = io.MultiWriter(&stdout, log)
	cmd.Stderr = io.MultiWriter(&stderr, log)
	if err := proc.Run().Err(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s", filepath.Base(c.Name), strings.Join(first(c.Args, 3), " "), err, tail(stderr.String()+stdout.String()))
	}
	return stdout.String(), nil
}

// Run is Output without the output.
func Run(ctx context.Context, c Cmd) error {
	_, err := Output(ctx, c)
	return err
}

func first(args []string, n int) []string {
	if len(args) > n {
		return append(args[:n:n], "...")
	}
	return args
}

func tail(s string) string {
	s = strings.TrimSpace(s)
	const max = 3000
	if len(s) > max {
		s = "..." + s[len(s)-max:]
	}
	return s
}
