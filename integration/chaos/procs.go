package chaos

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// startTimeout bounds how long a child may take to print its ready line.
const startTimeout = 60 * time.Second

// BuildDemo builds the demo binary into dir and returns its path. root is
// the module's root directory.
func BuildDemo(root, dir string) (string, error) {
	path := filepath.Join(dir, "demo")
	cmd := exec.Command("go", "build", "-o", path, "./cmd/demo")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/demo: %w\n%s", err, out)
	}
	return path, nil
}

// ModuleRoot finds the directory holding go.mod, upwards from dir.
func ModuleRoot(dir string) (string, error) {
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above " + dir)
		}
		dir = parent
	}
}

// logBuffer is a process's output over all its incarnations, safe for
// concurrent writers.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// proc is one long-running child process, started again with the same
// arguments after each stop. Every exit the harness did not ask for is
// reported on the cluster's exits channel.
type proc struct {
	name string
	bin  string
	args []string
	log  *logBuffer

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	asked   bool // the harness asked the current incarnation to stop
	ready   bool // the current incarnation printed its ready line
	closed  bool // the run is over: no more starts
	stopped bool // SIGSTOPped and not continued
	starts  int

	unexpected func(p *proc, err error) // called once per unasked exit
}

// start runs p and waits for a line of its standard output matching
// ready, returning the submatches.
func (p *proc) start(ctx context.Context, ready *regexp.Regexp) ([]string, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, fmt.Errorf("%s: the run is over", p.name)
	}
	if p.cmd != nil {
		select {
		case <-p.exited:
		default:
			p.mu.Unlock()
			return nil, fmt.Errorf("%s: started while still running", p.name)
		}
	}
	p.starts++
	fmt.Fprintf(p.log, "=== %s: start #%d at %s: demo %s\n", p.name, p.starts, time.Now().Format("15:04:05.000"), strings.Join(p.args, " "))
	cmd := exec.Command(p.bin, p.args...)
	// A child outlives nothing: if the harness dies, so do they.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = p.log
	stdout, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		p.mu.Unlock()
		return nil, fmt.Errorf("%s: start: %w", p.name, err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited, p.asked, p.stopped, p.ready, p.waitErr = cmd, exited, false, false, false, nil
	p.mu.Unlock()

	readyCh := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintf(p.log, "[stdout] %s\n", line)
			if m := ready.FindStringSubmatch(line); m != nil {
				select {
				case readyCh <- m:
				default:
				}
			}
		}
		io.Copy(io.Discard, stdout)
		err := cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		asked, ready := p.asked, p.ready
		p.mu.Unlock()
		fmt.Fprintf(p.log, "=== %s: exited at %s: %v (asked: %t)\n", p.name, time.Now().Format("15:04:05.000"), err, asked)
		close(exited)
		// An exit before the ready line is start's error to report.
		if !asked && ready && p.unexpected != nil {
			p.unexpected(p, err)
		}
	}()

	t := time.NewTimer(startTimeout)
	defer t.Stop()
	select {
	case m := <-readyCh:
		p.mu.Lock()
		p.ready = true
		p.mu.Unlock()
		return m, nil
	case <-exited:
		return nil, fmt.Errorf("%s exited before it was ready: %v", p.name, p.exitErr())
	case <-t.C:
		return nil, fmt.Errorf("%s not ready after %s", p.name, startTimeout)
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: %w", p.name, ctx.Err())
	}
}

// signal sends sig to the running incarnation; asked marks an exit it
// causes as asked for. It returns false if p is not running.
func (p *proc) signal(sig syscall.Signal, asked bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
	}
	if asked {
		p.asked = true
	}
	switch sig {
	case syscall.SIGSTOP:
		p.stopped = true
	case syscall.SIGCONT:
		p.stopped = false
	}
	fmt.Fprintf(p.log, "=== %s: %s at %s\n", p.name, sig, time.Now().Format("15:04:05.000"))
	p.cmd.Process.Signal(sig)
	return true
}

// close kills p and keeps it from starting again.
func (p *proc) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.signal(syscall.SIGCONT, false)
	p.kill()
}

// kill sends SIGKILL and waits until p is gone, so that its state
// directory lock and its port are free when this returns.
func (p *proc) kill() {
	if p.signal(syscall.SIGKILL, true) {
		<-p.done()
	}
}

// terminate sends SIGTERM and waits up to timeout for p to exit, then
// kills it; it reports whether p exited by itself.
func (p *proc) terminate(timeout time.Duration) bool {
	if !p.signal(syscall.SIGTERM, true) {
		return true
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done():
		return true
	case <-t.C:
		p.kill()
		return false
	}
}

// done is closed once the current incarnation has exited.
func (p *proc) done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return p.exited
}

func (p *proc) running() bool {
	select {
	case <-p.done():
		return false
	default:
		return true
	}
}

func (p *proc) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

// logTail returns the last n bytes of s.
func logTail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "[...]\n" + s[len(s)-n:]
}
