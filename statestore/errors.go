package statestore

import "errors"

var errNilValue = errors.New("statestore: nil value (use Delete to remove a key)")
