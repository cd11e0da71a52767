//go:build !linux

package attn

// hugeMem: huge-page mappings are a Linux feature here; elsewhere the
// partial buffers live in the Go heap (mapHuge returns nil).
type hugeMem struct{ b []byte }

func mapHuge(n int) *hugeMem { return nil }

func (h *hugeMem) release() {}
