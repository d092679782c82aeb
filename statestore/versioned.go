package statestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// A versioned store keeps, for every key, its latest value and the older
// values still within its history retention, each version valid from its
// own timestamp until the next version's (KIP-889). Like window stores it
// is a key-value store with a composite key layout, so the record cache,
// the store backends and resets treat it as any other: VersionedStore
// translates its operations into Get, Put, Delete and Range on a
// ReadWriter (the task's cache, or a replica's store for a query). Only
// its changelog differs (see below).
//
// Keys. Each version is one key,
//
//	escaped key | 00 01 | ^validFrom (8)
//
// with the record key escaped as in window stores (window.go), and the
// timestamp stored so that later versions sort first: its bits xor
// math.MaxInt64, which turns the signed order into the unsigned one and
// reverses it. The latest version is then the key's first, and a walk from
// there meets each version right after the one that ends its validity,
// which a read as of T reports with it (a key holds few versions: only
// those within retention, see below). The value
// is a flag byte, 01 then the value, or 00 alone for a tombstone: a delete
// is a version too, since a query as of an earlier time still sees the
// value before it.
//
// Observed time. The store's observed time, the largest timestamp put, is
// kept under the key 00 00 (which no escaped key starts with) as 8 bytes,
// written by every put that raises it. A replica rebuilt from the
// changelog puts the same versions in the same order, so it has the same
// observed time, and a standby answers as-of queries with the same
// cut-off as the active at the same changelog position.
//
// Retention. A version whose validity ended at or before observed time
// minus the history retention can no longer be asked for; a put removes
// those of its own key. A key that is never written again keeps its last
// expired versions, which reads ignore.
//
// Changelog. The changelog does not hold these keys but the puts, as
// Kafka Streams' does (versioned_log.go): one record per version put, its
// key the record key, its value what a plain table's store holds (the
// timestamped value, see AppendTimestamped) or a tombstone, its timestamp
// the version's. A plain store reads those records as its own, and a
// versioned store is rebuilt by putting them again in changelog order,
// which yields the same versions, observed time and expirations.

// VersionedOptions configure a versioned store.
type VersionedOptions struct {
	// HistoryRetention, in milliseconds, is how far behind the store's
	// observed time a query may ask, and how late a put may arrive: a put
	// older than observed time minus HistoryRetention is dropped. 0 keeps
	// the latest value only and drops every out-of-order put.
	HistoryRetention int64
}

// Version is one version of a key: Value, valid from ValidFrom (included)
// until ValidTo (excluded), both in milliseconds; ValidTo is math.MaxInt64
// for the latest version.
type Version struct {
	Value              []byte
	ValidFrom, ValidTo int64
}

// OpenEnded is the ValidTo of a key's latest version.
const OpenEnded int64 = math.MaxInt64

// observedKey holds the store's observed time; see the layout above.
var observedKey = []byte{0, 0}

const (
	versionValue     byte = 1
	versionTombstone byte = 0
)

var errCorruptVersion = errors.New("statestore: corrupt versioned store entry")

// VersionedStore is the byte-level versioned key-value store over a
// ReadWriter that holds only its keys (see the layout above). It keeps no
// state of its own between calls, so a writer and any number of readers
// may each open one over the same store.
type VersionedStore struct {
	rw        ReadWriter
	retention int64
	// log, when rw is a VersionLogger, is told of every version put.
	log VersionLogger
}

// NewVersionedStore returns a versioned store over rw. If rw is a
// VersionLogger, each version put is also handed to it, for the
// changelog.
func NewVersionedStore(rw ReadWriter, opts VersionedOptions) (*VersionedStore, error) {
	if opts.HistoryRetention < 0 {
		return nil, fmt.Errorf("statestore: versioned store history retention must not be negative, got %d", opts.HistoryRetention)
	}
	log, _ := rw.(VersionLogger)
	return &VersionedStore{rw: rw, retention: opts.HistoryRetention, log: log}, nil
}

func versionKey(key []byte, ts int64) []byte {
	return binary.BigEndian.AppendUint64(prefix(key), uint64(ts)^math.MaxInt64)
}

func versionTime(k []byte) (int64, error) {
	if len(k) < 8 {
		return 0, errCorruptKey
	}
	return int64(binary.BigEndian.Uint64(k[len(k)-8:]) ^ math.MaxInt64), nil
}

// ObservedTime is the largest timestamp put, or math.MinInt64 before any.
func (s *VersionedStore) ObservedTime() (int64, error) {
	b, found, err := s.rw.Get(observedKey)
	if err != nil || !found {
		return math.MinInt64, err
	}
	if len(b) != 8 {
		return math.MinInt64, errCorruptVersion
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

// minLive is the earliest time a query may ask for at observed time obs.
func (s *VersionedStore) minLive(obs int64) int64 {
	if obs < math.MinInt64+s.retention {
		return math.MinInt64
	}
	return obs - s.retention
}

// Get returns key's latest version, not found if it has none or its latest
// is a tombstone.
func (s *VersionedStore) Get(key []byte) (Version, bool, error) {
	return s.find(key, math.MaxInt64)
}

// GetAsOf returns key's version valid at asOf: the one with the largest
// ValidFrom at or before asOf, not found if there is none, if it is a
// tombstone, or if asOf is older than the store's observed time minus its
// history retention (that past is no longer kept).
func (s *VersionedStore) GetAsOf(key []byte, asOf int64) (Version, bool, error) {
	return s.find(key, asOf)
}

func (s *VersionedStore) find(key []byte, asOf int64) (Version, bool, error) {
	if asOf != math.MaxInt64 {
		obs, err := s.ObservedTime()
		if err != nil {
			return Version{}, false, err
		}
		if asOf < s.minLive(obs) {
			return Version{}, false, nil
		}
	}
	p := prefix(key)
	it, err := s.rw.Range(p, afterKey(append([]byte(nil), p...)))
	if err != nil {
		return Version{}, false, err
	}
	v, found, err := s.scan(it, asOf)
	return v, found, errors.Join(err, it.Close())
}

// scan walks one key's versions, latest first, to the one valid at asOf;
// the version before it in the walk ends its validity.
func (s *VersionedStore) scan(it Iterator, asOf int64) (Version, bool, error) {
	validTo := OpenEnded
	for it.Next() {
		t, err := versionTime(it.Key())
		if err != nil {
			return Version{}, false, err
		}
		if t > asOf {
			validTo = t
			continue
		}
		b := it.Value()
		if len(b) == 0 || (b[0] != versionValue && b[0] != versionTombstone) {
			return Version{}, false, errCorruptVersion
		}
		if b[0] == versionTombstone {
			return Version{}, false, nil
		}
		return Version{Value: append([]byte(nil), b[1:]...), ValidFrom: t, ValidTo: validTo}, true, nil
	}
	return Version{}, false, it.Err()
}

// Put stores value as key's version from ts on; a nil value puts a
// tombstone. A version at ts already there is replaced. It reports put
// false, writing nothing, for a ts older than observed time minus the
// history retention, and otherwise the ValidTo of the new version:
// OpenEnded when it is the latest, else the ValidFrom of the next version
// (an out-of-order put, which changes history but not the latest value).
// Versions of key that the put makes unreachable are removed.
func (s *VersionedStore) Put(key, value []byte, ts int64) (validTo int64, put bool, err error) {
	obs, err := s.ObservedTime()
	if err != nil {
		return 0, false, err
	}
	if ts < s.minLive(obs) {
		return 0, false, nil
	}
	if ts > obs {
		obs = ts
		if err := s.rw.Put(observedKey, binary.BigEndian.AppendUint64(nil, uint64(obs))); err != nil {
			return 0, false, err
		}
	}
	minLive := s.minLive(obs)
	p := prefix(key)
	it, err := s.rw.Range(p, afterKey(append([]byte(nil), p...)))
	if err != nil {
		return 0, false, err
	}
	// The walk runs newest first: newer is the ValidFrom of the version
	// walked before, which ends the current one's validity unless the new
	// version comes between them.
	validTo = OpenEnded
	newer := OpenEnded
	var expired [][]byte
	// latest is the key's latest version as stored (flag and value), kept
	// for the log when the put is out of order.
	var latest []byte
	var latestTs int64
	for it.Next() {
		t, terr := versionTime(it.Key())
		if terr != nil {
			err = terr
			break
		}
		end := newer
		switch {
		case t > ts:
			if newer == OpenEnded && s.log != nil {
				latest, latestTs = append([]byte(nil), it.Value()...), t
			}
			validTo = t
		case t < ts:
			end = min(end, ts)
		}
		if t != ts && end <= minLive {
			expired = append(expired, append([]byte(nil), it.Key()...))
		}
		newer = t
	}
	if err = errors.Join(err, it.Err(), it.Close()); err != nil {
		return 0, false, err
	}
	for _, k := range expired {
		if err := s.rw.Delete(k); err != nil {
			return 0, false, err
		}
	}
	b := make([]byte, 1, 1+len(value))
	b[0] = versionTombstone
	if value != nil {
		b[0] = versionValue
		b = append(b, value...)
	}
	if err := s.rw.Put(versionKey(key, ts), b); err != nil {
		return 0, false, err
	}
	if s.log != nil {
		s.log.LogVersion(key, value, ts)
		if validTo != OpenEnded && len(latest) > 0 {
			// An out-of-order put is not the key's latest, but a
			// compacted changelog keeps a key's last record only, and a
			// plain store takes the last as the value: logging the
			// latest again after it keeps both right. Put again, it
			// changes nothing.
			var v []byte
			if latest[0] == versionValue {
				v = latest[1:]
			}
			s.log.LogVersion(key, v, latestTs)
		}
	}
	return validTo, true, nil
}

// ErrLayoutMismatch is returned by CheckVersionedLayout and
// CheckPlainLayout for a store that holds the other layout's entries:
// read the other way, it would be misread, not refused.
var ErrLayoutMismatch = errors.New("statestore: store holds entries of another layout")

// CheckVersionedLayout returns an error wrapping ErrLayoutMismatch if rw,
// opened as a versioned store, holds entries but no observed time: it was
// written as a plain key-value store. A versioned store writes its
// observed time with its first put, so only an empty store lacks it.
func CheckVersionedLayout(rw ReadWriter) error {
	obs, found, err := rw.Get(observedKey)
	if err != nil {
		return err
	}
	if found {
		if len(obs) != 8 {
			return fmt.Errorf("%w: a versioned store's observed time is 8 bytes, found %d", ErrLayoutMismatch, len(obs))
		}
		return nil
	}
	it, err := rw.All()
	if err != nil {
		return err
	}
	nonEmpty := it.Next()
	if err := errors.Join(it.Err(), it.Close()); err != nil {
		return err
	}
	if nonEmpty {
		return fmt.Errorf("%w: entries without a versioned store's observed time", ErrLayoutMismatch)
	}
	return nil
}

// CheckPlainLayout returns an error wrapping ErrLayoutMismatch if rw,
// opened as a plain key-value store, holds a versioned store's entries:
// an 8-byte observed time followed by a version key (ending in the key
// terminator 00 01 and a timestamp, its value flagged). A table's plain
// store cannot hold such an observed time: its values under the key 00 00
// would be timestamped, at least 12 bytes.
func CheckPlainLayout(rw ReadWriter) error {
	obs, found, err := rw.Get(observedKey)
	if err != nil || !found || len(obs) != 8 {
		return err
	}
	it, err := rw.Range(append(observedKey[:len(observedKey):len(observedKey)], 0), nil)
	if err != nil {
		return err
	}
	versioned := it.Next() && isVersionEntry(it.Key(), it.Value())
	if err := errors.Join(it.Err(), it.Close()); err != nil {
		return err
	}
	if versioned {
		return fmt.Errorf("%w: a versioned store's observed time and versions", ErrLayoutMismatch)
	}
	return nil
}

// isVersionEntry reports whether key and value are a version's, as a
// versioned store writes them.
func isVersionEntry(key, value []byte) bool {
	n, rest, err := splitRest(key)
	if err != nil || n+8 != len(key) || len(rest) != 8 || len(value) == 0 {
		return false
	}
	switch value[0] {
	case versionTombstone:
		return len(value) == 1
	case versionValue:
		return true
	}
	return false
}
