package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gpulab/gpulab/internal/version"
)

// Command is what every benchmark command's main shares: the flags of
// Options and --version, the exit codes (1 failed, 2 bad usage), quiet
// testbed clients and a context that SIGINT and SIGTERM end.
type Command struct {
	// Name is the command's name; its errors start with it.
	Name    string
	version *bool
}

// Flags are the defaults and help of the Options flags whose meaning
// differs between commands.
type Flags struct {
	// Out and OutHelp are --out's default and help.
	Out, OutHelp string
	// TestbedName and TestbedHelp are --testbed-name's.
	TestbedName, TestbedHelp string
}

// NewCommand registers --suite, --operator-binary, --out, --testbed-name
// and --version on the command line, into opts, and sends opts' progress
// to stdout.
func NewCommand(name string, opts *Options, f Flags) *Command {
	opts.Log = os.Stdout
	flag.StringVar(&opts.Suite, "suite", "bin/gpulab-conformance", "the gpulab-conformance binary")
	flag.StringVar(&opts.Operator, "operator-binary", "bin/gpulab-operator", "the gpulab-operator binary")
	flag.StringVar(&opts.Out, "out", f.Out, f.OutHelp)
	flag.StringVar(&opts.TestbedName, "testbed-name", f.TestbedName, f.TestbedHelp)
	return &Command{Name: name, version: flag.Bool("version", false, "print the version and exit")}
}

// Parse parses the command line; with --version it prints the version
// and exits.
func (c *Command) Parse() {
	flag.Parse()
	if *c.version {
		fmt.Println(c.Name, version.Get())
		os.Exit(0)
	}
}

// Usage says what is wrong with the command line and exits 2.
func (c *Command) Usage(format string, args ...any) {
	fmt.Fprintf(os.Stderr, c.Name+": "+format+"\n", args...)
	os.Exit(2)
}

// Exit exits 1, saying why, unless err is nil.
func (c *Command) Exit(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, c.Name+":", err)
		os.Exit(1)
	}
}

// Run runs the benchmark until it ends or a signal stops it, and exits 1
// when it fails. The testbed's clients log through controller-runtime,
// which Run silences: progress goes to stdout already.
func (c *Command) Run(run func(ctx context.Context) error) {
	ctrllog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	c.Exit(err)
}
