// Command edgeproc is an edge stream processor for courier GPS positions:
// MQTT in, event-time sliding distance and no-signal sessions, NATS out.
//
//	edgeproc run --config FILE [--config FILE...] [--log-level L] [--log-format text|json]
//	edgeproc replay --config FILE [--in FILE|-] [--out FILE|-]
//	edgeproc daily --config FILE --date YYYY-MM-DD [--out FILE|-]
//	edgeproc check-config FILE...
//	edgeproc tail [--nats URL] [--market M...] [--type T...] [--since D] [--json]
//	edgeproc deadzones --config FILE (--in FILE|- | --since D) [--out FILE|-]
//	edgeproc health [URL]
//	edgeproc sim --market M [--mqtt URL] [--rate R] ...
//	edgeproc demo [--couriers N] [--duration D] [--seed S]
//	edgeproc version
//
// `edgeproc help COMMAND` (or COMMAND --help) describes a command, with an
// example. Exit codes: 0 success, 1 failure, 2 a command-line mistake.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/km0/edgeproc/metrics"
)

// usageError is a command-line mistake: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// runFunc runs a command once its flags are parsed; args are what the
// flags left.
type runFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// command is one subcommand: its help text and how to set it up. setup
// defines the command's flags on fs and returns what runs it.
type command struct {
	name    string
	args    string // after the name in the synopsis
	summary string // one line, for the command list
	help    string // what it does, paragraphs
	example string
	setup   func(fs *flag.FlagSet) runFunc
}

// commands in the order `edgeproc help` lists them.
var commands = []*command{
	runCommand, replayCommand, dailyCommand, checkConfigCommand, tailCommand, deadzonesCommand, healthCommand, simCommand, demoCommand,
	{
		name: "version", summary: "print the version",
		help: `Prints the version: the one the build set (-ldflags "-X main.version=..."),
else the module version (go install ...@v1.2.3), else the git commit the
binary was built from (with -dirty for uncommitted changes), else "dev".`,
		example: "edgeproc version",
		setup: func(*flag.FlagSet) runFunc {
			return func(_ context.Context, args []string, stdout, _ io.Writer) error {
				if len(args) > 0 {
					return usageError{"version takes no arguments"}
				}
				_, err := fmt.Fprintln(stdout, "edgeproc", binaryVersion())
				return err
			}
		},
	},
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

func main() {
	metrics.Version = binaryVersion()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printUsage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "-help":
		printUsage(stdout)
		return 0
	case "--version", "-version":
		fmt.Fprintln(stdout, "edgeproc", binaryVersion())
		return 0
	case "help":
		if len(args) == 1 {
			printUsage(stdout)
			return 0
		}
		c := lookup(args[1])
		if c == nil || len(args) > 2 {
			fmt.Fprintf(stderr, "edgeproc help: unknown command %q\n\n", strings.Join(args[1:], " "))
			printUsage(stderr)
			return 2
		}
		printHelp(stdout, c)
		return 0
	}
	c := lookup(args[0])
	if c == nil {
		fmt.Fprintf(stderr, "edgeproc: unknown command %q\n\n", args[0])
		printUsage(stderr)
		return 2
	}
	fs := newFlagSet(c.name)
	runCmd := c.setup(fs)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printHelp(stdout, c)
			return 0
		}
		return fail(stderr, c, usageError{err.Error()})
	}
	if err := runCmd(ctx, fs.Args(), stdout, stderr); err != nil {
		return fail(stderr, c, err)
	}
	return 0
}

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned and printed once, by fail
	fs.Usage = func() {}
	return fs
}

// fail prints err, one line per joined error, each prefixed with the
// command's name once, and returns the exit code: 2 for a usage error
// (followed by the synopsis), 1 otherwise.
func fail(stderr io.Writer, c *command, err error) int {
	for _, line := range strings.Split(strings.TrimRight(err.Error(), "\n"), "\n") {
		// An error that already starts with the command's name ("demo:
		// ...") gets the program's name only.
		prefix := "edgeproc " + c.name + ": "
		if strings.HasPrefix(line, c.name+": ") {
			prefix = "edgeproc "
		}
		fmt.Fprintf(stderr, "%s%s\n", prefix, line)
	}
	if _, ok := errors.AsType[usageError](err); ok {
		fmt.Fprintf(stderr, "usage: edgeproc %s %s\n(edgeproc help %s for more)\n", c.name, c.args, c.name)
		return 2
	}
	return 1
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `edgeproc: an edge stream processor for courier GPS positions
(MQTT in, event-time distance windows and no-signal sessions, NATS JetStream out).

usage: edgeproc COMMAND [ARGS]

commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
edgeproc help COMMAND (or edgeproc COMMAND --help) describes a command.
edgeproc --version prints the version.
Exit codes: 0 success, 1 failure, 2 a command-line mistake.
`)
}

// printHelp prints a command's synopsis, description, flags and example.
func printHelp(w io.Writer, c *command) {
	fmt.Fprintf(w, "usage: edgeproc %s %s\n\n%s\n", c.name, c.args, strings.TrimSpace(c.help))
	fs := newFlagSet(c.name)
	c.setup(fs)
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		fmt.Fprint(w, "\nflags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
	fmt.Fprintf(w, "\nexample:\n  %s\n", strings.ReplaceAll(strings.TrimSpace(c.example), "\n", "\n  "))
}
