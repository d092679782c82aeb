// Command demo shows Eddy counting words.
//
// With no subcommand it runs a self-contained demo in one process: an
// embedded broker and three word-count instances with a standby each, fed
// generated text, queried through the routing client, with one instance
// killed hard and restarted while a live view shows roles, lags, restores
// and answers; it exits 0 when every final count equals the words produced:
//
//	demo [--duration D] [--rate N] [--instances N] [--standbys N] [--no-chaos] [--forever] [--state-dir DIR] [--seed N]
//
// The subcommands run the same pieces as separate processes:
//
//	demo broker   --listen HOST:PORT [--data-dir DIR] [--partitions N] [--tls-dir DIR] [--sasl-user U]
//	demo instance --brokers HOST:PORT[,...] --state-dir DIR --http HOST:PORT [--app wordcount] [--standbys N]
//	demo produce  --brokers HOST:PORT[,...] [--topic text] [--file F] [--tls-ca F] [--sasl-user U]
//	demo query    --http HOST:PORT WORD [--staleness active|any|lag:N|age:D]
//	demo status   --http HOST:PORT
//	demo tasks    --http HOST:PORT [--all] [--json]
//	demo reset    --brokers HOST:PORT[,...] [--app wordcount] [--state-dir DIR] [--to-time TIME] [--dry-run]
//	demo watch    --http HOST:PORT WORD [--staleness active|any|lag:N|age:D] [--spread]
//
// Run "demo COMMAND -h" for a command's flags.
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
)

// stdio is the standard streams a command uses, passed in so that tests can
// run commands in-process.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

// command runs one subcommand. It returns when its work is done or ctx is
// cancelled (by SIGINT or SIGTERM).
type command struct {
	name     string
	synopsis string // flags, as shown in usage
	run      func(ctx context.Context, args []string, s stdio) error
}

// Synopses of the subcommands, shared by the overall usage and each
// command's own.
const (
	brokerSynopsis   = "--listen HOST:PORT [--data-dir DIR] [--partitions N] [--tls-dir DIR] [--sasl-user U --sasl-password P]"
	instanceSynopsis = "--brokers HOST:PORT[,...] --state-dir DIR --http HOST:PORT [--app wordcount] [--standbys N] [--tag KEY=VALUE]... [--rack-tags KEY[,KEY]] [--guarantee at-least-once|exactly-once] [--session-timeout D] [--static-membership] [--tls-ca F] [--sasl-user U --sasl-password P] [--query-tls-cert F --query-tls-key F] [--query-tls-ca F] [--query-token-file F]"
	produceSynopsis  = "--brokers HOST:PORT[,...] [--topic text] [--file F] [--tls-ca F] [--sasl-user U --sasl-password P]"
)

var commands = []command{
	{"broker", brokerSynopsis, runBroker},
	{"instance", instanceSynopsis, runInstance},
	{"produce", produceSynopsis, runProduce},
	{"query", querySynopsis, runQuery},
	{"status", statusSynopsis, runStatus},
	{"tasks", tasksSynopsis, runTasks},
	{"reset", resetSynopsis, runReset},
	{"watch", watchSynopsis, runWatch},
}

// errUsage marks errors caused by how the command was invoked. The message
// and usage are already printed when it is returned; main only sets the
// exit status.
var errUsage = errors.New("usage error")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal a second one should kill the process outright
	// rather than wait for a graceful shutdown that may be stuck.
	go func() { <-ctx.Done(); stop() }()
	err := run(ctx, os.Args[1:], stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr})
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

func exitCode(err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
}

// run dispatches to the subcommand named by args[0], or to the default demo
// when there is none (no arguments, or flags only).
func run(ctx context.Context, args []string, s stdio) error {
	if len(args) == 0 || (strings.HasPrefix(args[0], "-") && !isHelp(args[0])) {
		return runDefault(ctx, args, s)
	}
	if isHelp(args[0]) {
		printUsage(s.out)
		return nil
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(ctx, args[1:], s)
		}
	}
	fmt.Fprintf(s.err, "demo: unknown command %q\n\n", args[0])
	printUsage(s.err)
	return errUsage
}

func isHelp(arg string) bool {
	switch arg {
	case "help", "-h", "-help", "--help":
		return true
	}
	return false
}

func printUsage(w io.Writer) {
	fmt.Fprintf(w, "usage: demo %s\n", defaultSynopsis)
	for _, c := range commands {
		fmt.Fprintf(w, "       demo %s %s\n", c.name, c.synopsis)
	}
	fmt.Fprintln(w, "\nWith no command, runs the whole demo in this process: a word-count cluster whose")
	fmt.Fprintln(w, "state stays queryable while one of its instances is killed and restarted. Its flags:")
	printDemoFlags(w)
	fmt.Fprintln(w, "\nRun \"demo COMMAND -h\" for a command's flags.")
}

// newFlagSet returns a flag set for a subcommand whose errors and help go to
// s.err.
func newFlagSet(name, synopsis string, s stdio) *flag.FlagSet {
	fs := flag.NewFlagSet("demo "+name, flag.ContinueOnError)
	fs.SetOutput(s.err)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: demo %s %s\n\nflags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	fs.String(configFlag, "", "YAML `FILE` of flag values, by flag name (default: $"+envName(configFlag)+"); every flag may also be set by its variable $"+envPrefix+"NAME")
	return fs
}

// parseFlags parses args into fs, accepting no positional arguments, and
// resolves the flags the command line leaves unset from the environment and
// the config file. The error, if any, is flag.ErrHelp or wraps errUsage.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		// The flag package has printed the problem and the usage.
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return usageErrorf(fs, "unexpected argument %q", fs.Arg(0))
	}
	return resolveFlags(fs)
}

// usageErrorf prints a problem with the invocation and fs's usage, and
// returns an error wrapping errUsage.
func usageErrorf(fs *flag.FlagSet, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintf(fs.Output(), "%s: %s\n", fs.Name(), msg)
	fs.Usage()
	return fmt.Errorf("%w: %s", errUsage, msg)
}

// splitBrokers parses a comma-separated --brokers value.
func splitBrokers(v string) []string {
	var out []string
	for _, b := range strings.Split(v, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}
