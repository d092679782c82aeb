package chaos

import (
	"bufio"
	"net"
	"reflect"
	"testing"
	"time"
)

// A seed draws the same schedule every time, within its duration, with
// the faults on one target apart.
func TestGenerateReplays(t *testing.T) {
	a := Generate(42, 2*time.Minute, 3, AllKinds, 0)
	b := Generate(42, 2*time.Minute, 3, AllKinds, 0)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("seed 42 drew two schedules:\n%s\n%s", a, b)
	}
	if c := Generate(43, 2*time.Minute, 3, AllKinds, 0); reflect.DeepEqual(a, c) {
		t.Fatal("seeds 42 and 43 drew the same schedule")
	}
	if len(a) < 20 {
		t.Fatalf("only %d faults in two minutes:\n%s", len(a), a)
	}
	end := map[int]time.Duration{}
	for _, f := range a {
		if f.At+f.Hold >= 2*time.Minute {
			t.Errorf("%s ends after the schedule", f)
		}
		if f.At < end[f.Target] {
			t.Errorf("%s starts before the previous fault on its target ended", f)
		}
		end[f.Target] = f.At + f.Hold
	}
	for _, f := range Generate(42, 2*time.Minute, 3, AllKinds, -1) {
		if f.Kind == DiskFull {
			t.Fatalf("%s drawn without a tmpfs", f)
		}
	}
}

// The proxy forwards, holds everything while cut and forwards it once
// healed, and resets connections.
func TestProxyCutsAndResets(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					c.Write([]byte(sc.Text() + "\n"))
				}
			}()
		}
	}()
	p, err := newProxy(func() string { return ln.Addr().String() })
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	c, err := net.Dial("tcp", p.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	echo := func(msg string, within time.Duration) (string, error) {
		c.SetDeadline(time.Now().Add(within))
		if _, err := c.Write([]byte(msg + "\n")); err != nil {
			return "", err
		}
		return r.ReadString('\n')
	}
	if got, err := echo("one", 5*time.Second); err != nil || got != "one\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}
	p.setCut(true)
	if got, err := echo("two", 300*time.Millisecond); err == nil {
		t.Fatalf("answered %q while cut", got)
	}
	p.setCut(false)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("after the cut healed: %q, %v", got, err)
	}
	p.reset()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("the connection survived a reset")
	}
}
