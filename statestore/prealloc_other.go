//go:build !linux

package statestore

// preallocator does nothing where Eddy has no fallocate to call: badger's
// mapped files stay sparse, and a filesystem filled by another process can
// kill the process with SIGBUS (see BadgerOptions.DiskReserve).
type preallocator struct{}

func startPrealloc(string, BadgerOptions) *preallocator { return nil }

func (p *preallocator) stop() {}

func (p *preallocator) check() error { return nil }

func (p *preallocator) ahead(int64) error { return nil }
