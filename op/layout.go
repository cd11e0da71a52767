package op

import (
	"fmt"

	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// PagedLayout is the memory layout of paged K/V (FlashInfer's kv_layout).
// The zero value is HND, the reference's layout.
type PagedLayout int

const (
	// HND is [num_pages, Hkv, page_size, D]: head-major pages (the
	// reference's layout; the default).
	HND PagedLayout = iota
	// NHD is [num_pages, page_size, Hkv, D]: token-major pages (the default
	// of flash-attn and FlashInfer). NVFP4 block scales number their rows
	// the same way: row (page*page_size + slot)*Hkv + h.
	NHD
)

// String returns "HND" or "NHD".
func (l PagedLayout) String() string {
	switch l {
	case HND:
		return "HND"
	case NHD:
		return "NHD"
	}
	return fmt.Sprintf("PagedLayout(%d)", int(l))
}

// shape describes the layout's K/V shape with last dimension last ("D" or
// "D/2"). It returns constants: decode's Run path must not allocate.
func (l PagedLayout) shape(last string) string {
	switch {
	case l == NHD && last == "D":
		return "[num_pages, page_size, Hkv, D]"
	case l == NHD:
		return "[num_pages, page_size, Hkv, D/2]"
	case last == "D":
		return "[num_pages, Hkv, page_size, D]"
	}
	return "[num_pages, Hkv, page_size, D/2]"
}

// dims returns Hkv and the page size of a rank-4 paged K/V shape.
func (l PagedLayout) dims(s tensor.Shape) (hkv, pageSize int) {
	if l == NHD {
		return s[2], s[1]
	}
	return s[1], s[2]
}

// hkvDim names the dimension of k that holds Hkv.
func (l PagedLayout) hkvDim() string {
	if l == NHD {
		return "k.shape[2]"
	}
	return "k.shape[1]"
}

// other says how to select the other layout, for error messages.
func (l PagedLayout) other() string {
	if l == NHD {
		return "; HND [num_pages, Hkv, page_size, D] is the default layout"
	}
	return "; for NHD [num_pages, page_size, Hkv, D] set the NHD layout (KVLayout)"
}

// checkLayout records an error unless l is a known layout, and rejects NHD
// without a page table (dense K/V has one layout).
func checkLayout(c *validate.Checker, l PagedLayout, paged bool) {
	if l != HND && l != NHD {
		c.Fail("kv_layout", "HND or NHD", l)
		return
	}
	if l == NHD && !paged {
		c.Fail("kv_layout", "HND (the default) without page_table: dense K/V [total_k, Hkv, D] has one layout", l)
	}
}
