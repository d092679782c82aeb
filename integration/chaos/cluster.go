package chaos

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

var (
	brokerReady   = regexp.MustCompile(`^listening on (\S+)$`)
	instanceReady = regexp.MustCompile(`^instance (\S+) serving on http://(\S+)$`)
)

// instance is one demo instance process with its state directory, query
// address and broker proxy, kept across restarts.
type instance struct {
	*proc
	idx      int
	http     string
	stateDir string
	proxy    *proxy
	tmpfs    bool // stateDir is a small tmpfs (the disk-full target)
	// mu serializes the faults on this instance and its restarts.
	mu sync.Mutex
}

// cluster is the broker and instance processes of one run.
type cluster struct {
	opts   Options
	dir    string
	broker *proc
	addr   string // the broker's fixed host:port
	brMu   sync.Mutex
	insts  []*instance

	mu       sync.Mutex
	closing  bool
	findings []string // unasked exits, instances that do not start
	exits    int
	// startFailures counts starts that failed (the process exited or
	// was not ready in time) and were tried again.
	startFailures int
	ctx           context.Context
}

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func (c *cluster) logf(format string, args ...any) {
	if c.opts.Log != nil {
		fmt.Fprintf(c.opts.Log, time.Now().Format("15:04:05.000")+" "+format+"\n", args...)
	}
}

// newCluster starts the broker on a fixed port, so that a restart comes
// back where the instances' proxies send them, and the instances.
func newCluster(ctx context.Context, o Options, diskFull bool) (*cluster, error) {
	c := &cluster{opts: o, dir: o.Dir, ctx: ctx}
	var err error
	if c.addr, err = freePort(); err != nil {
		return nil, err
	}
	c.broker = c.newProc("broker", "broker", "--listen", c.addr, "--data-dir", filepath.Join(c.dir, "broker"),
		"--partitions", strconv.Itoa(o.Partitions))
	if _, err := c.broker.start(ctx, brokerReady); err != nil {
		return c, err
	}
	for i := range o.Instances {
		in := &instance{idx: i, stateDir: filepath.Join(c.dir, fmt.Sprintf("i%d", i+1))}
		if in.http, err = freePort(); err != nil {
			return c, err
		}
		if in.proxy, err = newProxy(func() string { return c.addr }); err != nil {
			return c, err
		}
		if err := os.MkdirAll(in.stateDir, 0o755); err != nil {
			return c, err
		}
		if diskFull && i == 0 {
			in.tmpfs = mountTmpfs(in.stateDir) == nil
		}
		in.proc = c.newProc(fmt.Sprintf("i%d", i+1), "instance", "--brokers", c.addr,
			"--broker-dial-via", in.proxy.addr(), "--state-dir", in.stateDir, "--http", in.http,
			"--standbys", "1", "--guarantee", o.Guarantee, "--session-timeout", o.SessionTimeout.String(),
			"--keep-repartition-records")
		c.insts = append(c.insts, in)
		if err := c.startInstance(ctx, in); err != nil {
			return c, err
		}
	}
	return c, nil
}

func (c *cluster) newProc(name string, args ...string) *proc {
	p := &proc{name: name, bin: c.opts.Bin, args: args, log: new(logBuffer)}
	p.unexpected = c.unexpectedExit
	return p
}

// unexpectedExit records an exit nobody asked for and starts the process
// again, so that the run goes on.
func (c *cluster) unexpectedExit(p *proc, err error) {
	c.mu.Lock()
	closing := c.closing
	if !closing {
		c.exits++
		c.findings = append(c.findings, fmt.Sprintf("%s exited unasked at %s: %v; log tail:\n%s",
			p.name, time.Now().Format("15:04:05.000"), err, indent(logTail(p.log.String(), 3000))))
	}
	c.mu.Unlock()
	if closing {
		return
	}
	c.logf("FINDING: %s exited unasked: %v", p.name, err)
	go func() {
		// Not at once: a process that dies as it starts would spin.
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(time.Second):
		}
		if p == c.broker {
			c.brMu.Lock()
			defer c.brMu.Unlock()
			if !p.running() {
				c.startBroker()
			}
			return
		}
		for _, in := range c.insts {
			if in.proc == p {
				in.mu.Lock()
				if !in.running() {
					c.startInstance(c.ctx, in)
				}
				in.mu.Unlock()
			}
		}
	}()
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

// startBroker starts the broker again, on its port and data directory,
// retrying while the run lasts.
func (c *cluster) startBroker() {
	for c.ctx.Err() == nil {
		_, err := c.broker.start(c.ctx, brokerReady)
		if err == nil {
			return
		}
		c.logf("broker restart failed: %v", err)
		c.broker.kill()
		select {
		case <-c.ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// startInstance starts in, retrying while the run lasts: a start may wait
// for a broker that is down, or fail (on a full disk, say). Each failure
// is counted; an instance that cannot be started at all is a finding.
func (c *cluster) startInstance(ctx context.Context, in *instance) error {
	var err error
	for attempt := range 5 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if _, err = in.start(ctx, instanceReady); err == nil {
			return nil
		}
		c.logf("%s: start failed: %v", in.name, err)
		in.kill()
		c.mu.Lock()
		c.startFailures++
		c.mu.Unlock()
	}
	c.mu.Lock()
	c.findings = append(c.findings, fmt.Sprintf("%s does not start: %v; log tail:\n%s", in.name, err, indent(logTail(in.log.String(), 3000))))
	c.mu.Unlock()
	return err
}

// close stops every process and proxy, and unmounts the tmpfs.
func (c *cluster) close() {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	for _, in := range c.insts {
		in.close()
		in.proxy.close()
		if in.tmpfs {
			exec.Command("umount", "-l", in.stateDir).Run()
		}
	}
	if c.broker != nil {
		c.broker.close()
	}
	// The logs stay with the run's directory, for whoever keeps it.
	for _, p := range c.procs() {
		os.WriteFile(filepath.Join(c.dir, p.name+".log"), []byte(p.log.String()), 0o644)
	}
}

func (c *cluster) procs() []*proc {
	ps := []*proc{c.broker}
	for _, in := range c.insts {
		ps = append(ps, in.proc)
	}
	return slices.DeleteFunc(ps, func(p *proc) bool { return p == nil })
}

// names replaces the instances' query addresses in s by their names.
func (c *cluster) names(s string) string {
	for _, in := range c.insts {
		s = strings.ReplaceAll(s, in.http, in.name)
	}
	return s
}

// nameOf names the instance serving queries at host.
func (c *cluster) nameOf(host string) string {
	for _, in := range c.insts {
		if in.http == host {
			return in.name
		}
	}
	return host
}

// mountTmpfs mounts a small tmpfs at dir, for the disk-full fault. It
// needs root (or CAP_SYS_ADMIN).
func mountTmpfs(dir string) error {
	if os.Geteuid() != 0 {
		return errors.New("not root")
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=384m", "tmpfs", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mount tmpfs: %v: %s", err, out)
	}
	return nil
}

// fill writes a file into dir until the file system is full.
func fill(dir string) (string, error) {
	f, err := os.Create(filepath.Join(dir, "chaos-filler"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for {
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return f.Name(), nil
			}
			return f.Name(), err
		}
	}
}

// sharedStoresDir is the folder of an application's state directory that
// holds the shared database of its task stores (runtime.StoreLayoutShared,
// see runtime/layout.go).
const sharedStoresDir = "stores"

// storeDirs lists the instance's badger database directories, sorted: the
// shared database of its task stores, STATE/APP/stores, and the stores
// with a database of their own, STATE/APP/TASK/STORE (the global stores,
// and every store in the per-store layout).
func (in *instance) storeDirs() []string {
	var out []string
	tasks, _ := os.ReadDir(filepath.Join(in.stateDir, app))
	for _, t := range tasks {
		if !t.IsDir() {
			continue
		}
		if t.Name() == sharedStoresDir {
			out = append(out, filepath.Join(in.stateDir, app, t.Name()))
			continue
		}
		stores, _ := os.ReadDir(filepath.Join(in.stateDir, app, t.Name()))
		for _, s := range stores {
			if s.IsDir() {
				out = append(out, filepath.Join(in.stateDir, app, t.Name(), s.Name()))
			}
		}
	}
	slices.Sort(out)
	return out
}

// damage applies d to one store of the instance (chosen by pick among
// those on disk) and returns the store's directory and what was done; ""
// when no store has the files the damage needs. The instance is down.
func (in *instance) damage(d Damage, pick uint32) (string, string, error) {
	dirs := in.storeDirs()
	if len(dirs) == 0 {
		return "", "", nil
	}
	filesOf := func(dir, suffix string) []string {
		var out []string
		filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
			if err == nil && !e.IsDir() && strings.HasSuffix(e.Name(), suffix) {
				if info, err := e.Info(); err == nil && info.Size() > 0 {
					out = append(out, path)
				}
			}
			return nil
		})
		return out
	}
	// Candidates are the stores that have what d needs; pick chooses.
	var suffix string
	switch d {
	case TruncateTable, FlipTable:
		suffix = ".sst"
	case TruncateLog:
		suffix = ".vlog"
	case DropManifest:
		suffix = "MANIFEST"
	}
	var cands []string
	for _, dir := range dirs {
		if suffix == "" || len(filesOf(dir, suffix)) > 0 {
			cands = append(cands, dir)
		}
	}
	if len(cands) == 0 {
		return "", "", nil
	}
	dir := cands[int(pick)%len(cands)]
	if d == DropStore {
		return dir, "deleted " + dir, os.RemoveAll(dir)
	}
	files := filesOf(dir, suffix)
	file := files[int(pick/7)%len(files)]
	info, err := os.Stat(file)
	if err != nil {
		return "", "", err
	}
	switch d {
	case TruncateTable, TruncateLog:
		return dir, fmt.Sprintf("truncated %s from %d to %d bytes", file, info.Size(), info.Size()/2), os.Truncate(file, info.Size()/2)
	case FlipTable:
		f, err := os.OpenFile(file, os.O_RDWR, 0)
		if err != nil {
			return "", "", err
		}
		defer f.Close()
		at := info.Size() / 2
		buf := make([]byte, min(64, info.Size()-at))
		if _, err := f.ReadAt(buf, at); err != nil {
			return "", "", err
		}
		for i := range buf {
			buf[i] ^= 0xff
		}
		_, err = f.WriteAt(buf, at)
		return dir, fmt.Sprintf("flipped %d bytes at %d of %s", len(buf), at, file), err
	default: // DropManifest
		return dir, "deleted " + file, os.Remove(file)
	}
}

// wipeLine is the runtime's warning that it deletes a store to rebuild it.
var wipeLine = regexp.MustCompile(`level=WARN msg="[^"]*delet[^"]*".* dir=("[^"]*"|\S+)`)

// wipedDirs returns the store directories the instance's log says it
// deleted to rebuild, with how often.
func (in *instance) wipedDirs() map[string]int {
	out := make(map[string]int)
	for _, m := range wipeLine.FindAllStringSubmatch(in.log.String(), -1) {
		dir := m[1]
		if uq, err := strconv.Unquote(dir); err == nil {
			dir = uq
		}
		out[dir]++
	}
	return out
}
