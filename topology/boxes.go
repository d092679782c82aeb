package topology

import "unsafe"

// stringBoxes holds strings that the graph hands on as values of type any
// without allocating a box for each: converting a string to an interface
// copies its header to the heap, one allocation per string, while an
// interface made by at points into the slice, one allocation for all. The
// slice is a copy nobody modifies, so each interface's value is as fixed
// as a box of its own; it keeps the others' headers (16 bytes each) alive
// as long as any of them lives.
type stringBoxes []string

func (b stringBoxes) at(i int) any {
	var v any
	e := (*eface)(unsafe.Pointer(&v))
	e.typ, e.data = stringType, unsafe.Pointer(&b[i])
	return v
}

// eface is the layout of an interface{} value: its dynamic type and a
// pointer to its value (for a string, to the string's header).
type eface struct {
	typ, data unsafe.Pointer
}

// stringType is the dynamic type word of a string in an interface.
var stringType = func() unsafe.Pointer {
	var v any = ""
	return (*eface)(unsafe.Pointer(&v)).typ
}()

// newStringBoxes copies ss into stringBoxes.
func newStringBoxes(ss []string) stringBoxes {
	b := make(stringBoxes, len(ss))
	copy(b, ss)
	return b
}
