package broker

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Kafka keeps every idempotent producer's recent sequence numbers per
// partition across a crash: it rebuilds them from the log at start. kfake
// saves them (seq_windows.json) only when it is closed, and after a kill it
// accepts any sequence from a producer it has no window for. A batch kfake
// wrote just before it was killed, whose answer never reached the producer,
// is then written a second time when the producer retries it, after the
// records that followed it: an at-least-once changelog goes back to an
// older value, and a store restored from it loses counts.
//
// So before kfake starts, the broker rebuilds each window from the batch
// headers in the log wherever the log holds a batch of that producer newer
// than the window kfake saved, as Kafka's recovery does.

// seqWindowsFile is where kfake keeps its producers' sequence windows in
// a DataDir, and seqWindowsVersion the version of its format.
const (
	seqWindowsFile    = "seq_windows.json"
	seqWindowsVersion = 1
	// seqWindowLen is how many batches a window remembers, as in Kafka.
	seqWindowLen = 5
)

// Record batch header fields read here beside crashtxns.go's.
const (
	batchBaseSeqAt = 53 // int32
	batchCountAt   = 57 // int32
)

// seqWindows mirrors kfake's seq_windows.json. Windows are kept raw, so
// that those not rebuilt are written back as kfake wrote them.
type seqWindows struct {
	Version int               `json:"version"`
	Windows []json.RawMessage `json:"windows"`
}

// seqWindow is one producer's window in one partition, in kfake's format:
// Entries[:Count] are its last batches, At is where the next one goes.
type seqWindow struct {
	PID     int64       `json:"pid"`
	Topic   string      `json:"topic"`
	Part    int32       `json:"partition"`
	Entries [5]seqBatch `json:"entries,omitempty"`
	Count   uint8       `json:"count,omitempty"`
	At      uint8       `json:"at"`
	Epoch   int16       `json:"epoch"`
	Seen    bool        `json:"seen,omitempty"`
	NextSeq int32       `json:"next_seq,omitempty"`
}

// seqBatch is one batch of a window: its sequences and base offset.
type seqBatch struct {
	FirstSeq int32 `json:"first_seq"`
	NextSeq  int32 `json:"next_seq"`
	Offset   int64 `json:"offset"`
}

// seqKey names a producer's window in a partition.
type seqKey struct {
	pid   int64
	topic string
	part  int32
}

// lastOffset is the base offset of the window's newest batch, or -1.
func (w *seqWindow) lastOffset() int64 {
	last := int64(-1)
	for _, e := range w.Entries[:min(int(w.Count), seqWindowLen)] {
		last = max(last, e.Offset)
	}
	return last
}

// rebuildSeqWindows rewrites dataDir's sequence windows where the log is
// newer than them, and reports how many it rebuilt.
func rebuildSeqWindows(dataDir string) (int, error) {
	fromLog, err := scanSeqWindows(dataDir)
	if err != nil || len(fromLog) == 0 {
		return 0, err
	}
	path := filepath.Join(dataDir, seqWindowsFile)
	saved := seqWindows{Version: seqWindowsVersion}
	switch b, err := os.ReadFile(path); {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return 0, err
	default:
		if err := json.Unmarshal(b, &saved); err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
	}
	at := make(map[seqKey]int)
	lastAt := make(map[seqKey]int64)
	for i, raw := range saved.Windows {
		var w seqWindow
		if err := json.Unmarshal(raw, &w); err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
		k := seqKey{w.PID, w.Topic, w.Part}
		at[k], lastAt[k] = i, w.lastOffset()
	}
	rebuilt := 0
	for _, k := range slices.SortedFunc(maps.Keys(fromLog), compareSeqKeys) {
		w := fromLog[k]
		i, ok := at[k]
		if ok && lastAt[k] >= w.lastOffset() {
			continue
		}
		raw, err := json.Marshal(w)
		if err != nil {
			return 0, err
		}
		if ok {
			saved.Windows[i] = raw
		} else {
			saved.Windows = append(saved.Windows, raw)
		}
		rebuilt++
	}
	if rebuilt == 0 {
		return 0, nil
	}
	b, err := json.Marshal(saved)
	if err != nil {
		return 0, err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return 0, err
	}
	return rebuilt, os.Rename(tmp, path)
}

func compareSeqKeys(a, b seqKey) int {
	return cmp.Or(strings.Compare(a.topic, b.topic), cmp.Compare(a.part, b.part), cmp.Compare(a.pid, b.pid))
}

// scanSeqWindows builds, from the batch headers of every partition's
// segments, each producer's window of its last batches.
func scanSeqWindows(dataDir string) (map[seqKey]*seqWindow, error) {
	out := make(map[seqKey]*seqWindow)
	err := eachPartitionDir(dataDir, func(topic string, partition int32, dir string) error {
		return eachBatchHeader(dir, func(hdr []byte) {
			attrs := binary.BigEndian.Uint16(hdr[batchAttrsAt:])
			pid := int64(binary.BigEndian.Uint64(hdr[batchPIDAt:]))
			seq := int32(binary.BigEndian.Uint32(hdr[batchBaseSeqAt:]))
			if attrs&attrControl != 0 || pid < 0 || seq < 0 {
				return
			}
			k := seqKey{pid, topic, partition}
			w := out[k]
			if w == nil {
				w = &seqWindow{PID: pid, Topic: topic, Part: partition}
				out[k] = w
			}
			w.add(int16(binary.BigEndian.Uint16(hdr[batchEpochAt:])), seq,
				int32(binary.BigEndian.Uint32(hdr[batchCountAt:])), int64(binary.BigEndian.Uint64(hdr[0:])))
		})
	})
	return out, err
}

// add puts a batch at the head of the window, as kfake does on accepting
// it: a new epoch starts the window again.
func (w *seqWindow) add(epoch int16, first, n int32, offset int64) {
	next := int32((int64(first) + int64(n)) % math.MaxInt32)
	if !w.Seen || epoch != w.Epoch {
		*w = seqWindow{PID: w.PID, Topic: w.Topic, Part: w.Part, Epoch: epoch, Seen: true}
	}
	w.Entries[w.At] = seqBatch{FirstSeq: first, NextSeq: next, Offset: offset}
	w.At = (w.At + 1) % seqWindowLen
	w.Count = min(w.Count+1, seqWindowLen)
	w.NextSeq = next
}

// eachBatchHeader calls fn with the header of every batch in a partition's
// segments, in offset order, stopping in each segment at the first batch
// cut short (as kfake's replay does).
func eachBatchHeader(dir string, fn func(hdr []byte)) error {
	files, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var bases []int64
	for _, f := range files {
		if base, ok := strings.CutSuffix(f.Name(), ".dat"); ok {
			if n, err := strconv.ParseInt(base, 10, 64); err == nil {
				bases = append(bases, n)
			}
		}
	}
	slices.Sort(bases)
	for _, base := range bases {
		if err := eachSegmentHeader(filepath.Join(dir, fmt.Sprintf("%d.dat", base)), fn); err != nil {
			return err
		}
	}
	return nil
}

func eachSegmentHeader(path string, fn func(hdr []byte)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	var hdr [batchHeaderBytes]byte
	for off, end := int64(0), info.Size(); end-off >= batchHeaderBytes; {
		if _, err := f.ReadAt(hdr[:], off); err != nil {
			return err
		}
		size := 12 + int64(int32(binary.BigEndian.Uint32(hdr[batchLengthAt:])))
		if size < batchHeaderBytes || size > end-off || hdr[batchMagicAt] != 2 {
			break
		}
		fn(hdr[:])
		off += size
	}
	return nil
}
