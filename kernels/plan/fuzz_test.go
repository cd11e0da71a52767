package plan

import (
	"encoding/binary"
	"math/rand"
	"slices"
	"strings"
	"testing"
)

// byteReader hands out fuzz bytes, zeros when exhausted.
type byteReader struct{ b []byte }

func (r *byteReader) next() int {
	if len(r.b) == 0 {
		return 0
	}
	v := int(r.b[0])
	r.b = r.b[1:]
	return v
}

func checkErrText(t *testing.T, err error) {
	t.Helper()
	if err != nil && !strings.HasPrefix(err.Error(), "plan: ") {
		t.Fatalf("error without prefix: %v", err)
	}
}

// FuzzBuildK2QCSR builds CSRs from arbitrary (often invalid) inputs: it must
// never panic, and when it succeeds the result must match the naive
// reference and pass ValidateCSR, and the forward schedule built on it must
// pass ValidateFwdSchedule.
func FuzzBuildK2QCSR(f *testing.F) {
	f.Add([]byte{1, 3, 2, 2, 3, 7, 2, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17})
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{3, 7, 0, 4, 0, 0, 4, 20, 1, 5, 2, 0, 1, 255, 254, 3, 3, 3, 3, 3, 3, 3, 3, 0, 0, 1, 2})
	f.Add([]byte{2, 1, 4, 3, 200, 1, 1, 1, 1, 1, 1, 2, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &byteReader{data}
		p := problem{hkv: 1 + r.next()%4, topK: 1 + r.next()%8, blkKV: 1 + r.next()%5}
		nb := r.next() % 5
		p.cuQ = make([]int32, nb+1)
		p.cuK = make([]int32, nb+1)
		for b := 0; b < nb; b++ {
			dq, dk := r.next(), r.next()
			p.cuQ[b+1] = p.cuQ[b] + int32(dq%5)
			p.cuK[b+1] = p.cuK[b] + int32(dk%24)
			if dq == 255 {
				p.cuQ[b+1] = p.cuQ[b] - 1 // non-monotone
			}
			if dk == 254 {
				p.cuK[b+1] = -1
			}
		}
		p.totalQ = int(p.cuQ[nb])
		switch r.next() % 8 {
		case 0:
			p.totalQ++
		case 1:
			p.totalQ--
		}
		n := p.hkv * max(p.totalQ, 0) * p.topK
		if r.next()%16 == 0 {
			n++
		}
		p.q2k = make([]int32, n)
		for i := range p.q2k {
			v := r.next()
			switch {
			case v < 96:
				p.q2k[i] = -1
			case v == 255:
				p.q2k[i] = -2
			default:
				p.q2k[i] = int32(v % 7)
			}
		}
		c, err := BuildK2QCSR(nil, p.q2k, p.hkv, p.totalQ, p.topK, p.cuQ, p.cuK, p.blkKV)
		checkErrText(t, err)
		if err != nil {
			return
		}
		wantRP, wantQI, _ := naiveCSR(p)
		if !slices.Equal(c.RowPtr, wantRP) || !slices.Equal(c.QIdx, wantQI) {
			t.Fatal("CSR differs from the naive reference")
		}
		rows, err := NewRows(p.cuK, p.blkKV)
		if err != nil {
			t.Fatal(err)
		}
		if err := ValidateCSR(c, p.totalQ, p.topK, p.cuQ, rows); err != nil {
			t.Fatal(err)
		}
		fp := FwdParams{TotalQ: p.totalQ, Hkv: p.hkv, QheadPerKV: 1 << (r.next() % 5), TopK: p.topK, BlkKV: p.blkKV, Workers: 1 + r.next()%4}
		s, err := BuildFwdSchedule(nil, c, rows, p.cuQ, fp)
		if err != nil {
			t.Fatal(err)
		}
		if err := ValidateFwdSchedule(s, c, rows, p.cuQ, fp); err != nil {
			t.Fatal(err)
		}
		if p.cuQ[0] == 0 && int(p.cuQ[nb]) == p.totalQ {
			checkSchedule(t, p, fp, rows, c, s)
		}
	})
}

// FuzzFwdSchedule corrupts a valid CSR and schedule: validation and building
// must never panic, and a schedule that passes ValidateFwdSchedule must
// cover every CSR entry exactly once with in-range indices.
func FuzzFwdSchedule(f *testing.F) {
	f.Add(int64(1), []byte{})
	f.Add(int64(2), []byte{0, 1, 0, 5, 0})
	f.Add(int64(3), []byte{2, 0, 0, 255, 255, 3, 1, 0, 0, 1})
	f.Add(int64(4), []byte{4, 2, 0, 0, 7, 5, 0, 0, 0, 0, 1, 3, 0, 0, 0})
	f.Fuzz(func(t *testing.T, seed int64, muts []byte) {
		p := randProblem(rand.New(rand.NewSource(seed)))
		fp := fwdParams(p)
		rows, c, s := buildAll(t, p, fp)
		for len(muts) >= 5 {
			m := muts[:5]
			muts = muts[5:]
			v := int32(int16(binary.LittleEndian.Uint16(m[3:5])))
			idx := int(binary.LittleEndian.Uint16(m[1:3]))
			var buf []int32
			switch m[0] % 6 {
			case 0:
				buf = c.RowPtr
			case 1:
				buf = c.QIdx
			case 2:
				buf = s.Metadata
			case 3:
				buf = s.QSplit
				v = v&0xff | (v>>8)<<24
			case 4:
				buf = s.SplitCounts
			case 5:
				s.WorkCount = v
			}
			if len(buf) > 0 {
				buf[idx%len(buf)] = v
			}
		}
		errC := ValidateCSR(c, p.totalQ, p.topK, p.cuQ, rows)
		checkErrText(t, errC)
		err := ValidateFwdSchedule(s, c, rows, p.cuQ, fp)
		checkErrText(t, err)
		if err == nil {
			if errC != nil {
				t.Fatal("schedule validated over an invalid CSR")
			}
			cover := make([]int, len(c.QIdx))
			for i := 0; i < int(s.WorkCount); i++ {
				m := s.Metadata[i*6 : i*6+6]
				lo := int(c.RowPtr[int(m[0])*(c.TotalRows+1)+int(m[1])])
				for e := lo + int(m[2]); e < lo+int(m[2]+m[3]); e++ {
					cover[int(m[0])*c.Stride+e]++
				}
			}
			for h := 0; h < c.Hkv; h++ {
				end := int(c.RowPtr[h*(c.TotalRows+1)+c.TotalRows])
				for e := 0; e < end; e++ {
					if cover[h*c.Stride+e] != 1 {
						t.Fatalf("validated schedule covers entry %d of head %d %d times", e, h, cover[h*c.Stride+e])
					}
				}
			}
		}
		s2, err := BuildFwdSchedule(nil, c, rows, p.cuQ, fp)
		checkErrText(t, err)
		if (err == nil) != (errC == nil) {
			t.Fatalf("BuildFwdSchedule err %v, ValidateCSR err %v", err, errC)
		}
		if err == nil {
			if err := ValidateFwdSchedule(s2, c, rows, p.cuQ, fp); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// FuzzDecodeSchedule builds decode schedules from arbitrary params and
// seqused_k: no panic; a built schedule validates and satisfies the
// invariants; a corrupted one is either refused or still consistent.
func FuzzDecodeSchedule(f *testing.F) {
	f.Add([]byte{2, 1, 2, 1, 7, 8, 0, 40, 0, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Add([]byte{5, 4, 3, 2, 0, 200, 3, 255, 3, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9})
	f.Add([]byte{1, 1, 1, 1, 1, 1, 1, 1, 1, 1})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{3, 20, 4, 0, 2, 30, 0, 100, 6, 50, 60, 70, 80, 90, 100, 1, 0, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &byteReader{data}
		p := DecodeParams{
			Batch: r.next()%7 - 1, SeqlenQ: r.next()%24 - 1, Hkv: r.next()%5 - 1,
		}
		p.HQ = p.Hkv * (r.next() % 17)
		p.PageSize = []int{0, 1, 2, 16, 64, 128, 256}[r.next()%7]
		p.Workers = r.next()%250 - 1
		p.FixedSplitPages = r.next()%40 - 30
		p.MaxPagesPerSeq = r.next() - 1
		flags := r.next()
		p.DisableSplit, p.FixedCapacity = flags&1 != 0, flags&2 != 0
		seq := make([]int32, max(p.Batch, 0)+flags>>7)
		for b := range seq {
			seq[b] = int32(r.next()*r.next()*max(p.PageSize, 1)/64 - flags>>6&1)
		}
		s, err := BuildDecodeSchedule(nil, seq, p)
		checkErrText(t, err)
		if err != nil {
			return
		}
		if err := ValidateDecodeSchedule(s, seq, p); err != nil {
			t.Fatal(err)
		}
		checkDecode(t, s, seq, p)
		// corrupt one field; validation must not panic, and if it passes the
		// items still index in range
		if s.Capacity > 0 && len(r.b) >= 2 {
			i := r.next() % s.Capacity
			v := int32(int8(r.next()))
			switch v & 3 {
			case 0:
				s.Request[i] = v
			case 1:
				s.KVTile[i] = v
			case 2:
				s.KVHead[i] = v
			case 3:
				s.Valid[i] = v
			}
			if ValidateDecodeSchedule(s, seq, p) == nil {
				for j := 0; j < s.WorkCount; j++ {
					if s.Request[j] < 0 || int(s.Request[j]) >= p.Batch || s.KVHead[j] < 0 || int(s.KVHead[j]) >= p.Hkv || s.KVTile[j] < 0 || s.KVTile[j] >= s.SplitCounts[s.Request[j]] {
						t.Fatalf("validated schedule has item %d out of range", j)
					}
				}
			}
		}
		// growth beyond the plan is detected
		grown := append([]int32(nil), seq...)
		for b := range grown {
			grown[b] = int32(min(int64(p.MaxPagesPerSeq)*int64(p.PageSize), 1<<30))
		}
		checkErrText(t, ValidateDecodeSchedule(s, grown, p))
	})
}
