package op

import "github.com/sparseattn/msa/op/internal/decode"

// DefaultMaxWorkspaceBytes is the most bytes a decode workspace may take
// unless DecodeArgs.MaxWorkspaceBytes (or the MaxWorkspaceBytes option of
// the DecodeAttention node) says otherwise: 4 GiB. A decode workspace is
// the float32 split-KV partials, 4 · partial_rows · Hq · (D + 1) bytes,
// plus the schedule, 20 · capacity + 16 · B + 4 bytes. Both follow scalar
// arguments (the page table's width, fixed_split_size, seqused_k), not the
// size of q, k and v: a one-page K/V with a page table of 2^20 columns and
// a fixed split of one page asks for 137 GB. The limit turns that into an
// error before anything is allocated.
const DefaultMaxWorkspaceBytes int64 = decode.DefaultMaxWorkspaceBytes
