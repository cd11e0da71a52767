package tile

import "unsafe"

// Hint is a memory range the caller will read after the next Acc.Update
// (Acc.Prefetch): Bytes bytes at Addr.
type Hint struct {
	Addr  unsafe.Pointer
	Bytes int
}

// maxHints is the number of ranges one Acc.Prefetch keeps.
const maxHints = 16

// hints is the prefetch schedule of one update: the ranges and a cursor.
type hints struct {
	r     [maxHints]Hint
	n     int // ranges in r
	i     int // current range
	off   int // bytes of r[i] already prefetched
	lines int // lines left over all ranges
}

// set replaces the schedule with h (at most maxHints ranges are kept).
func (s *hints) set(h []Hint) {
	s.n = copy(s.r[:], h)
	s.i, s.off, s.lines = 0, 0, 0
	for _, x := range s.r[:s.n] {
		if x.Addr != nil && x.Bytes > 0 {
			s.lines += (x.Bytes + 63) / 64
		}
	}
}

// issue prefetches about 1/parts of the lines left (parts >= 1: the
// remaining steps of the update).
func (s *hints) issue(parts int) {
	if s.lines == 0 {
		return
	}
	k := (s.lines + parts - 1) / parts
	s.lines -= k
	for k > 0 && s.i < s.n {
		x := &s.r[s.i]
		left := (x.Bytes - s.off + 63) / 64
		if x.Addr == nil || left <= 0 {
			s.i, s.off = s.i+1, 0
			continue
		}
		c := min(k, left)
		prefetchLines(uintptr(x.Addr)+uintptr(s.off), c)
		s.off += 64 * c
		k -= c
	}
}
