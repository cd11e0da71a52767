package calib

import (
	"strings"
	"testing"
)

// TestReadBandwidth checks that both read loops give a positive rate over a
// buffer shared unevenly among workers, and that bad arguments are refused
// with an error naming them.
func TestReadBandwidth(t *testing.T) {
	sum, scan, err := ReadBandwidth(1<<20+24, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !(sum > 0) || !(scan > 0) {
		t.Fatalf("sum %v GB/s, scan %v GB/s, want both > 0", sum, scan)
	}
	for _, c := range []struct {
		size, workers, passes int
		want                  string
	}{
		{1 << 20, 0, 1, "workers = 0"},
		{1 << 20, 2, 0, "passes = 0"},
		{15, 2, 1, "size = 15 bytes"},
	} {
		_, _, err := ReadBandwidth(c.size, c.workers, c.passes)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ReadBandwidth(%d, %d, %d): error %v, want one naming %q", c.size, c.workers, c.passes, err, c.want)
		}
	}
}

// TestSum8 checks the 8-accumulator sum against a plain loop for lengths
// around the unrolled step.
func TestSum8(t *testing.T) {
	for n := 0; n < 20; n++ {
		s := make([]uint64, n)
		want := uint64(0)
		for i := range s {
			s[i] = uint64(i*i + 1)
			want += s[i]
		}
		if got := sum8(s); got != want {
			t.Errorf("len %d: sum8 = %d, want %d", n, got, want)
		}
	}
}
