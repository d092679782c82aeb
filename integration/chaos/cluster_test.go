package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/eddystreams/eddy/statestore"
)

// Corrupt damages what the runtime's default layout puts on disk: the
// shared database of the task stores is a store directory to damage, and
// a task directory beside it, which holds no database, is not.
func TestDamageFindsSharedDatabase(t *testing.T) {
	in := &instance{stateDir: t.TempDir()}
	shared := filepath.Join(in.stateDir, app, sharedStoresDir)
	db, err := statestore.OpenSharedBadger(shared, statestore.BadgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := db.Open("1_0/counts")
	if err != nil {
		t.Fatal(err)
	}
	var es []statestore.Entry
	for i := range 1000 {
		es = append(es, statestore.Entry{Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")})
	}
	if err := s.Write(es, 1); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(in.stateDir, app, "1_0"), 0o755); err != nil {
		t.Fatal(err)
	}

	if got := in.storeDirs(); len(got) != 1 || got[0] != shared {
		t.Fatalf("store directories %q, want only %s", got, shared)
	}
	dir, what, err := in.damage(FlipTable, 3)
	if err != nil || dir != shared {
		t.Fatalf("damage: %q %q %v, want a table of %s flipped", dir, what, err, shared)
	}
}
