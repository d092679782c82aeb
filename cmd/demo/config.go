package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Every flag of every command may also come from an environment variable
// and from a YAML config file: a flag on the command line wins over its
// variable, which wins over the file, which wins over the default. The
// precedence lives in resolveFlags alone, so that a new flag gets it
// without code of its own.

// envPrefix starts the environment variable of every flag: --sasl-password
// is EDDY_SASL_PASSWORD, --config is EDDY_CONFIG.
const envPrefix = "EDDY_"

// configFlag names the config file's flag, which newFlagSet adds to every
// command.
const configFlag = "config"

// envName is the environment variable that gives flag name a value when the
// command line does not.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// secretFlags hold values that must never be printed or logged.
var secretFlags = []string{"sasl-password"}

// flagsResolved, when set (by tests), sees each command's flags once they
// are resolved; an error it returns stops the command.
var flagsResolved func(fs *flag.FlagSet) error

// resolveFlags gives each flag of fs that the command line left unset the
// value of its environment variable, if that is set and not empty, or else
// the value of its key in the config file. A file key no flag of fs has is
// an error, so that a misspelt setting is not silently ignored. Errors wrap
// errUsage.
func resolveFlags(fs *flag.FlagSet) error {
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	var errs []error
	set := func(name, value, from string) {
		if err := fs.Set(name, value); err != nil {
			errs = append(errs, fmt.Errorf("--%s from %s: %w", name, from, err))
		}
	}
	if v := os.Getenv(envName(configFlag)); v != "" && !onCommandLine[configFlag] {
		set(configFlag, v, "$"+envName(configFlag))
	}
	file := ""
	if f := fs.Lookup(configFlag); f != nil {
		file = f.Value.String()
	}
	settings, err := readConfigFile(file)
	if err != nil {
		return usageErrorf(fs, "%v", err)
	}
	for _, key := range slices.Sorted(maps.Keys(settings)) {
		if key == configFlag || fs.Lookup(key) == nil {
			errs = append(errs, fmt.Errorf("%s: %q is not a flag of %s", file, key, fs.Name()))
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if onCommandLine[f.Name] || f.Name == configFlag {
			return
		}
		if v := os.Getenv(envName(f.Name)); v != "" {
			set(f.Name, v, "$"+envName(f.Name))
			return
		}
		for _, v := range settings[f.Name] {
			set(f.Name, v, file)
		}
	})
	if err := errors.Join(errs...); err != nil {
		return usageErrorf(fs, "%v", err)
	}
	if flagsResolved != nil {
		return flagsResolved(fs)
	}
	return nil
}

// readConfigFile reads a YAML mapping of flag names to values: a scalar, or
// a list of scalars for a flag that may be repeated (such as --tag). Values
// are taken as written, so that "1.10" stays "1.10" and "10s" is a
// duration. An empty name reads nothing.
func readConfigFile(name string) (map[string][]string, error) {
	if name == "" {
		return nil, nil
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", configFlag, err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("--%s %s: %w", configFlag, name, err)
	}
	out := map[string][]string{}
	if len(doc.Content) == 0 { // an empty file
		return out, nil
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("--%s %s: want a mapping of flag names to values", configFlag, name)
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		switch v.Kind {
		case yaml.ScalarNode:
			out[k.Value] = []string{v.Value}
		case yaml.SequenceNode:
			vals := []string{}
			for _, e := range v.Content {
				if e.Kind != yaml.ScalarNode {
					return nil, fmt.Errorf("--%s %s:%d: %s: want a list of plain values", configFlag, name, e.Line, k.Value)
				}
				vals = append(vals, e.Value)
			}
			out[k.Value] = vals
		default:
			return nil, fmt.Errorf("--%s %s:%d: %s: want a value or a list of values", configFlag, name, v.Line, k.Value)
		}
	}
	return out, nil
}

// logFlags choose how a command logs.
type logFlags struct {
	level, format string
}

// add adds --log-level (defaulting to level) and --log-format to fs.
func (f *logFlags) add(fs *flag.FlagSet, level string) {
	fs.StringVar(&f.level, "log-level", level, "log level: debug, info, warn or error")
	fs.StringVar(&f.format, "log-format", "text", "log format: text (logfmt) or json (one object a line)")
}

// logger returns a logger writing to w as the flags ask.
func (f logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch f.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: want text or json, got %q", f.format)
}

// logSettings logs, at info, every flag of fs whose value is not its
// default, so that an operator sees what the command was started with
// whichever of flags, environment and file each setting came from. Secrets
// show as "(set)".
func logSettings(log *slog.Logger, fs *flag.FlagSet) {
	var attrs []any
	fs.VisitAll(func(f *flag.Flag) {
		v := f.Value.String()
		if v == f.DefValue {
			return
		}
		if slices.Contains(secretFlags, f.Name) {
			v = "(set)"
		}
		attrs = append(attrs, slog.String(f.Name, v))
	})
	log.Info("settings", attrs...)
}
