// Package plural writes a count with its noun in the form that agrees with
// it, so human output says "1 problem" and "2 problems", never "1 problems".
package plural

import "fmt"

// Integer is every integer type a count is kept in.
type Integer interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 | ~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

// Count returns n followed by one when n is 1 and by many otherwise (0 takes
// the plural, as English does). Both forms are given because English plurals
// are not regular ("entry", "entries"; "batch", "batches").
func Count[N Integer](n N, one, many string) string {
	noun := many
	if n == 1 {
		noun = one
	}
	return fmt.Sprintf("%d %s", n, noun)
}
