// Command stamp prints the -ldflags that stamp a gpulab binary with its
// version, commit and build date (internal/version/stamp), so the Makefile
// and the release workflow build the same way:
//
//	go build -ldflags "$(go run ./internal/version/cmd/stamp)" ./operator/cmd/gpulab-operator
//	go run ./internal/version/cmd/stamp -format=env >> "$GITHUB_ENV"
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/gpulab/gpulab/internal/version/stamp"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("stamp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	format := fs.String("format", "ldflags", "ldflags, env (VERSION, COMMIT, BUILD_DATE, LDFLAGS lines), version, commit or date")
	dir := fs.String("dir", ".", "the checkout's root, holding VERSION")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "stamp: unexpected arguments %q\n", fs.Args())
		return 2
	}
	src, err := stamp.Read(ctx, stamp.ReadOptions{Dir: *dir})
	if err != nil {
		fmt.Fprintln(stderr, "stamp:", err)
		return 1
	}
	s, err := stamp.Resolve(src)
	if err != nil {
		fmt.Fprintln(stderr, "stamp:", err)
		return 1
	}
	switch *format {
	case "ldflags":
		fmt.Fprintln(stdout, s.LDFlags())
	case "env":
		fmt.Fprint(stdout, s.Env())
	case "version":
		fmt.Fprintln(stdout, s.Version)
	case "commit":
		fmt.Fprintln(stdout, s.Commit)
	case "date":
		fmt.Fprintln(stdout, s.BuildDate)
	default:
		fmt.Fprintf(stderr, "stamp: --format=%q: want ldflags, env, version, commit or date\n", *format)
		return 2
	}
	return 0
}
