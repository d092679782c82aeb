package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// zkServer is the Debian zookeeper package's launcher; Burrow keeps its
// own state in ZooKeeper and does not start without one.
const zkServer = "/usr/share/zookeeper/bin/zkServer.sh"

// freePort returns a loopback port nothing listens on (for programs that
// cannot be told to pick one).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startProcess runs name until the test ends, its output in dir/log. The
// channel it returns is closed if the process exits first.
func startProcess(t *testing.T, dir string, env []string, name string, args ...string) <-chan struct{} {
	t.Helper()
	out, err := os.Create(filepath.Join(dir, "log"))
	require.NoError(t, err)
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, out, out
	cmd.Env = append(os.Environ(), env...)
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		out.Close()
		if t.Failed() {
			b, _ := os.ReadFile(out.Name())
			t.Logf("%s output:\n%s", filepath.Base(name), b)
		}
	})
	return exited
}

// waitZooKeeper waits until the ZooKeeper at addr serves: it answers the
// srvr command (one of those it allows by default) with its mode. Its port
// opens before it does.
func waitZooKeeper(ctx context.Context, t *testing.T, addr string) {
	t.Helper()
	var last string
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			_, _ = c.Write([]byte("srvr"))
			b, _ := io.ReadAll(c)
			c.Close()
			last = string(b)
			if strings.Contains(last, "Mode: standalone") {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("ZooKeeper at %s does not serve; last said %q", addr, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// burrowLag is the part of Burrow's /v3/kafka/CLUSTER/consumer/GROUP/lag
// answer the test reads.
type burrowLag struct {
	Error  bool `json:"error"`
	Status struct {
		TotalLag   int64 `json:"totallag"`
		Partitions []struct {
			Topic      string `json:"topic"`
			Partition  int32  `json:"partition"`
			CurrentLag int64  `json:"current_lag"`
			End        *struct {
				Offset int64 `json:"offset"`
			} `json:"end"`
		} `json:"partitions"`
	} `json:"status"`
}

// Burrow, which learns consumer groups and their commits from
// __consumer_offsets only, sees a group's committed offsets and its lag.
func TestBurrowSeesGroupLag(t *testing.T) {
	burrow, err := exec.LookPath("Burrow")
	if err != nil {
		t.Skip("Burrow is not installed (Debian package burrow)")
	}
	if _, err := os.Stat(zkServer); err != nil {
		t.Skip("ZooKeeper, which Burrow needs, is not installed (Debian package zookeeper)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	b := start(t, Config{})
	createTopic(ctx, t, b, "lagt", 1, nil)
	producer := newClient(t, b)
	for i := range 10 {
		require.NoError(t, producer.ProduceSync(ctx, &kgo.Record{Topic: "lagt", Value: fmt.Append(nil, i)}).FirstErr())
	}
	consumer := newClient(t, b, kgo.ConsumerGroup("watched"), kgo.ConsumeTopics("lagt"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.MaxBufferedRecords(1))
	var read int
	for read < 4 {
		fs := consumer.PollRecords(ctx, 4-read)
		require.NoError(t, ctx.Err())
		read += fs.NumRecords()
	}
	require.NoError(t, consumer.CommitUncommittedOffsets(ctx))

	zkDir := t.TempDir()
	zkAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	_, zkPort, _ := strings.Cut(zkAddr, ":")
	require.NoError(t, os.WriteFile(filepath.Join(zkDir, "zoo.cfg"), fmt.Appendf(nil,
		"tickTime=2000\ndataDir=%s\nclientPort=%s\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n", zkDir, zkPort), 0o644))
	startProcess(t, zkDir, []string{"ZOOCFGDIR=" + zkDir, "ZOO_LOG_DIR=" + zkDir}, zkServer, "start-foreground", filepath.Join(zkDir, "zoo.cfg"))
	waitZooKeeper(ctx, t, zkAddr)

	burrowDir := t.TempDir()
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	seeds := fmt.Sprintf("%q", b.Addrs()[0])
	require.NoError(t, os.WriteFile(filepath.Join(burrowDir, "burrow.toml"), fmt.Appendf(nil, `
[general]
pidfile=%q
[logging]
level="info"
[zookeeper]
servers=[%q]
root-path="/burrow"
[client-profile.eddy]
client-id="burrow"
kafka-version="2.0.0"
[cluster.local]
class-name="kafka"
servers=[%s]
client-profile="eddy"
topic-refresh=2
offset-refresh=1
[consumer.local]
class-name="kafka"
cluster="local"
servers=[%s]
client-profile="eddy"
start-latest=false
[httpserver.default]
address=%q
[storage.default]
class-name="inmemory"
intervals=10
min-distance=1
`, filepath.Join(burrowDir, "burrow.pid"), zkAddr, seeds, seeds, httpAddr), 0o644))
	burrowExited := startProcess(t, burrowDir, nil, burrow, "--config-dir", burrowDir)

	// Burrow reads the topic from its start, then takes the topic's end
	// offsets every offset-refresh: the lag shows once it has both.
	url := "http://" + httpAddr + "/v3/kafka/local/consumer/watched/lag"
	var last string
	for {
		var lag burrowLag
		if resp, err := http.Get(url); err == nil {
			body := json.NewDecoder(resp.Body)
			if body.Decode(&lag) == nil && !lag.Error && len(lag.Status.Partitions) == 1 {
				p := lag.Status.Partitions[0]
				last = fmt.Sprintf("%+v", lag.Status)
				if p.End != nil && p.End.Offset == 4 && p.CurrentLag == 6 {
					require.Equal(t, "lagt", p.Topic)
					require.Equal(t, int64(6), lag.Status.TotalLag)
					return
				}
			}
			resp.Body.Close()
		}
		select {
		case <-burrowExited:
			t.Fatal("Burrow exited")
		case <-ctx.Done():
			t.Fatalf("Burrow never saw group watched commit 4 of 10 records; last answer: %s", last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
