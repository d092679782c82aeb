package statestore

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/dgraph-io/badger/v4/table"
	"github.com/dgraph-io/ristretto/v2/z"
)

// ErrCorruptTable marks a table file (.sst) of a store that fails its
// checksums or cannot be parsed: the store's files are damaged.
var ErrCorruptTable = errors.New("statestore: corrupt badger table file")

// checkTables reads every table file the store in dir's manifest lists and
// verifies its index and block checksums before badger opens the store.
//
// Badger opens table files on goroutines of its own: a truncated one makes
// it panic there, out of reach of any recover, and a garbled block makes
// the first read of it panic (in a stream thread, a restoration or a query
// handler). Badger's own verification at open (ChecksumVerificationMode
// OnTableRead) would not do either: it drops a table that fails its
// checksum and opens the store without its keys. Here a damaged table
// fails the open with ErrCorruptTable, on the caller's goroutine, so the
// store can be deleted and rebuilt from its changelog.
//
// Only tables the manifest lists are read, each with the compression the
// manifest records for it: a table a crash left half written is not in the
// manifest yet, and badger deletes it when it opens the store. A manifest
// that cannot be read is left to badger, which refuses to open the store.
// Encrypted tables are not checked (they need the key registry's keys).
// It reads every table once, decompressing its blocks.
func checkTables(dir string, bo badger.Options) error {
	f, err := os.Open(filepath.Join(dir, badger.ManifestFilename))
	if err != nil {
		return nil // a new store, or one badger will refuse
	}
	mf, _, err := badger.ReplayManifestFile(f, bo.ExternalMagicVersion, bo)
	f.Close()
	if err != nil {
		return nil
	}
	ids := slices.Sorted(maps.Keys(mf.Tables))
	for _, id := range ids {
		tm := mf.Tables[id]
		if tm.KeyID != 0 {
			continue
		}
		name := table.NewFilename(id, dir)
		err := checkTable(name, table.Options{
			ReadOnly:             true,
			BlockSize:            bo.BlockSize,
			Compression:          tm.Compression,
			ZSTDCompressionLevel: bo.ZSTDCompressionLevel,
		})
		if errors.Is(err, os.ErrNotExist) {
			// Badger itself reports a listed table that is missing.
			continue
		}
		if err != nil {
			return fmt.Errorf("%w %s: %v", ErrCorruptTable, name, err)
		}
	}
	return nil
}

// checkTable opens one table file read-only, verifies its checksums and
// closes it, turning a panic of badger's table code into an error.
func checkTable(name string, opts table.Options) (err error) {
	info, err := os.Stat(name)
	if err != nil {
		return err
	}
	if info.Size() < 16 {
		return fmt.Errorf("%d bytes: too short for a table", info.Size())
	}
	mf, err := z.OpenMmapFile(name, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	// A table's Close is its file's: unlike DecrRef, it does not delete it.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("reading it panicked: %s", firstLine(fmt.Sprint(r)))
		}
		_ = mf.Close(-1)
	}()
	// Verified below, block by block, so that OpenTable leaves the file open
	// whatever it finds.
	opts.ChkMode = options.NoVerification
	t, err := table.OpenTable(mf, opts)
	if err != nil {
		return err
	}
	return t.VerifyChecksum()
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
