package statestore

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sharedLevels summarises the shared DB's LSM tree: the tables in level 0,
// the tables below it, the bytes in the bottom level and the level badger
// compacts level 0 into.
func sharedLevels(d *SharedBadger) (l0, below int, bottom int64, base int) {
	ls := d.db.Levels()
	for _, l := range ls {
		switch {
		case l.Level == 0:
			l0 = l.NumTables
		default:
			below += l.NumTables
		}
		if l.IsBaseLevel {
			base = l.Level
		}
	}
	return l0, below, ls[len(ls)-1].Size, base
}

// TestSharedLevelZeroCompaction counts new keys into the shared DB, as a
// count of distinct keys does, and checks how badger compacts them. Every
// level-0 table spans every store's keys, so a compaction of level 0
// rewrites every table of the level it goes into: level 0 gathers ten
// memtables before its first compaction, and once the bottom level holds
// more than 8 MiB level 0 goes into a level above it, which stays small,
// rather than into all of the data.
func TestSharedLevelZeroCompaction(t *testing.T) {
	d, err := OpenSharedBadger(t.TempDir(), BadgerOptions{Logger: discardLogger()})
	require.NoError(t, err)
	defer d.Close()
	ss := make([]Store, 4)
	for i := range ss {
		ss[i], err = d.Open(fmt.Sprintf("0_%d/counts", i))
		require.NoError(t, err)
	}
	value := []byte{0, 0, 0, 0, 0, 0, 0, 1}
	next, pos := 0, int64(0)
	commit := func() {
		t.Helper()
		pos++
		groups := make([][]StoreWrite, len(ss))
		for i, s := range ss {
			es := make([]Entry, 1500)
			for j := range es {
				es[j] = Entry{Key: fmt.Appendf(nil, "k%09d", next), Value: value}
				next++
			}
			groups[i] = []StoreWrite{{Store: s, Entries: es, Position: pos}}
		}
		require.NoError(t, d.Commit(groups...))
	}

	// Writes wait for flushes only when memtables queue up, so level 0
	// is read after every commit: it must reach nine tables with nothing
	// compacted below it.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		commit()
		l0, below, _, _ := sharedLevels(d)
		require.Zero(t, below, "level 0 compacted at %d tables", l0)
		if l0 >= 9 {
			break
		}
		require.True(t, time.Now().Before(deadline), "level 0 holds %d tables after %d keys", l0, next)
	}

	for {
		commit()
		_, below, bottom, base := sharedLevels(d)
		if below > 0 && bottom > 8<<20 {
			require.Less(t, base, 6, "level 0 compacts into the bottom level holding %d bytes", bottom)
			return
		}
		require.True(t, time.Now().Before(deadline), "after %d keys: %d tables below level 0, %d bytes in the bottom level", next, below, bottom)
	}
}
