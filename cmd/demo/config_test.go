package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// errResolved stops a command once its flags are resolved.
var errResolved = errors.New("flags resolved")

// resolvedFlags runs demo with args, with the environment as set, and
// returns the value of each of the command's flags once resolved, without
// running the command.
func resolvedFlags(t *testing.T, args []string) map[string]string {
	t.Helper()
	got := map[string]string{}
	flagsResolved = func(fs *flag.FlagSet) error {
		fs.VisitAll(func(f *flag.Flag) { got[f.Name] = f.Value.String() })
		return errResolved
	}
	defer func() { flagsResolved = nil }()
	var out bytes.Buffer
	err := run(context.Background(), args, stdio{in: strings.NewReader(""), out: &out, err: &out})
	require.ErrorIs(t, err, errResolved, "demo %v:\n%s", args, out.String())
	return got
}

// layerValues returns, for flag f, a distinct valid value for each of the
// file, the environment and the command line, each unlike the default. A
// flag of a type it does not know fails the test, so that a new kind of
// flag cannot go untested.
func layerValues(t *testing.T, f *flag.Flag) (file, env, cmdline string) {
	t.Helper()
	if f.Name == "tag" {
		return "zone=file", "zone=env", "zone=flag"
	}
	g, ok := f.Value.(flag.Getter)
	require.True(t, ok, "--%s: a flag type the test does not know", f.Name)
	switch v := g.Get().(type) {
	case string:
		return "file-" + f.Name, "env-" + f.Name, "flag-" + f.Name
	case bool:
		not := fmt.Sprint(!v)
		return not, fmt.Sprint(v), not
	case int, int64, uint, uint64:
		return "101", "102", "103"
	case float64:
		return "1.5", "2.5", "3.5"
	case time.Duration:
		return "101ms", "102ms", "103ms"
	default:
		t.Fatalf("--%s: a flag type (%T) the test does not know", f.Name, v)
	}
	return
}

// TestConfigPrecedence holds every flag of every command to its order of
// precedence: command line over environment variable over config file over
// default.
func TestConfigPrecedence(t *testing.T) {
	names := []string{""}
	for _, c := range commands {
		names = append(names, c.name)
	}
	for _, name := range names {
		t.Run("demo "+name, func(t *testing.T) {
			cmd := []string{}
			if name != "" {
				cmd = []string{name}
			}
			// The flags and their defaults, as the command defines them.
			var flags []*flag.Flag
			flagsResolved = func(fs *flag.FlagSet) error {
				fs.VisitAll(func(f *flag.Flag) {
					if f.Name != configFlag {
						flags = append(flags, f)
					}
				})
				return errResolved
			}
			err := run(context.Background(), cmd, stdio{in: strings.NewReader(""), out: &bytes.Buffer{}, err: &bytes.Buffer{}})
			flagsResolved = nil
			require.ErrorIs(t, err, errResolved)
			require.NotEmpty(t, flags)

			var yaml strings.Builder
			var cmdline []string
			want := map[string][3]string{}
			for _, f := range flags {
				file, env, cl := layerValues(t, f)
				require.NotEqual(t, f.DefValue, file, "--%s", f.Name)
				want[f.Name] = [3]string{file, env, cl}
				fmt.Fprintf(&yaml, "%s: %q\n", f.Name, file)
				cmdline = append(cmdline, "--"+f.Name+"="+cl)
			}
			path := filepath.Join(t.TempDir(), "eddy.yaml")
			require.NoError(t, os.WriteFile(path, []byte(yaml.String()), 0o600))

			got := resolvedFlags(t, cmd)
			for _, f := range flags {
				require.Equal(t, f.DefValue, got[f.Name], "--%s with nothing set", f.Name)
			}
			got = resolvedFlags(t, append(cmd, "--config", path))
			for _, f := range flags {
				require.Equal(t, want[f.Name][0], got[f.Name], "--%s from the file", f.Name)
			}
			// The config file's own name may come from the environment.
			t.Setenv(envName(configFlag), path)
			got = resolvedFlags(t, cmd)
			for _, f := range flags {
				require.Equal(t, want[f.Name][0], got[f.Name], "--%s from the file named by $%s", f.Name, envName(configFlag))
			}
			for _, f := range flags {
				t.Setenv(envName(f.Name), want[f.Name][1])
			}
			got = resolvedFlags(t, cmd)
			for _, f := range flags {
				require.Equal(t, want[f.Name][1], got[f.Name], "--%s from $%s over the file", f.Name, envName(f.Name))
			}
			got = resolvedFlags(t, append(cmd, cmdline...))
			for _, f := range flags {
				require.Equal(t, want[f.Name][2], got[f.Name], "--%s on the command line over $%s and the file", f.Name, envName(f.Name))
			}
		})
	}
}

// TestConfigFileErrors: a config file that names no flag of the command,
// or is not a mapping, stops the command with a usage error naming the
// problem.
func TestConfigFileErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct{ name, body, want string }{
		{"misspelt.yaml", "brokers: a:1\nstandby: 2\n", `"standby" is not a flag of demo instance`},
		{"list.yaml", "- brokers\n", "want a mapping"},
		{"bad.yaml", "standbys: two\n", "--standbys from"},
		{"nested.yaml", "brokers:\n  a: b\n", "want a value or a list"},
	} {
		path := filepath.Join(dir, tt.name)
		require.NoError(t, os.WriteFile(path, []byte(tt.body), 0o600))
		var out bytes.Buffer
		err := run(context.Background(), []string{"instance", "--config", path}, stdio{in: strings.NewReader(""), out: &out, err: &out})
		require.ErrorIs(t, err, errUsage, tt.name)
		require.Contains(t, err.Error(), tt.want, tt.name)
	}
	var out bytes.Buffer
	err := run(context.Background(), []string{"instance", "--config", filepath.Join(dir, "missing.yaml")}, stdio{in: strings.NewReader(""), out: &out, err: &out})
	require.ErrorIs(t, err, errUsage)
}

// TestConfigRepeatedFlag: a list in the config file gives a repeatable flag
// each of its values, and its variable takes them comma-separated.
func TestConfigRepeatedFlag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "eddy.yaml")
	require.NoError(t, os.WriteFile(path, []byte("tag: [zone=a, rack=r1]\n"), 0o600))
	got := resolvedFlags(t, []string{"instance", "--config", path})
	require.Equal(t, "rack=r1,zone=a", got["tag"])
	t.Setenv(envName("tag"), "zone=b,rack=r2")
	got = resolvedFlags(t, []string{"instance", "--config", path})
	require.Equal(t, "rack=r2,zone=b", got["tag"])
}

// TestSettingsLogHidesSecrets: the settings a command logs at start show
// where they differ from the defaults, in text or JSON, and never a
// password, whether it came from the command line, the environment or the
// file.
func TestSettingsLogHidesSecrets(t *testing.T) {
	const secret = "hunter2-secret"
	path := filepath.Join(t.TempDir(), "eddy.yaml")
	require.NoError(t, os.WriteFile(path, []byte("sasl-password: "+secret+"\nbrokers: b:9092\n"), 0o600))
	for _, format := range []string{"text", "json"} {
		for _, args := range [][]string{
			{"--config", path},
			{"--sasl-password", secret, "--brokers", "b:9092"},
		} {
			fs := newFlagSet("instance", instanceSynopsis, stdio{err: &bytes.Buffer{}})
			fs.String("brokers", "", "")
			addSecurityFlags(fs)
			var logs logFlags
			logs.add(fs, "info")
			require.NoError(t, parseFlags(fs, append(args, "--log-format", format)))
			var out bytes.Buffer
			log, err := logs.logger(&out)
			require.NoError(t, err)
			logSettings(log, fs)
			require.NotContains(t, out.String(), secret)
			require.Contains(t, out.String(), "b:9092")
			if format == "json" {
				var rec map[string]any
				require.NoError(t, json.Unmarshal(out.Bytes(), &rec), out.String())
				require.Equal(t, "(set)", rec["sasl-password"])
			}
		}
	}
	t.Setenv(envName("sasl-password"), secret)
	fs := newFlagSet("instance", instanceSynopsis, stdio{err: &bytes.Buffer{}})
	addSecurityFlags(fs)
	var logs logFlags
	logs.add(fs, "info")
	require.NoError(t, parseFlags(fs, nil))
	var out bytes.Buffer
	log, err := logs.logger(&out)
	require.NoError(t, err)
	logSettings(log, fs)
	require.NotContains(t, out.String(), secret)
	require.Contains(t, out.String(), "sasl-password=(set)")
}
