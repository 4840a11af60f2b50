package dataset

import (
	"math"
	"testing"
)

func TestPermutationIsABijection(t *testing.T) {
	for _, n := range []uint64{1, 2, 3, 5, 7, 8, 13, 16, 31, 64, 97, 100, 1000, 1023, 1024, 1025, 65537, 1_000_000} {
		for _, shuffle := range []bool{false, true} {
			p := NewPermutation(n, 42, 3, shuffle)
			seen := make([]bool, n)
			moved := 0
			for pos := uint64(0); pos < n; pos++ {
				s := p.At(pos)
				if s >= n || seen[s] {
					t.Fatalf("n=%d: position %d maps to %d (out of range or repeated)", n, pos, s)
				}
				seen[s] = true
				if back := p.Position(s); back != pos {
					t.Fatalf("n=%d: Position(At(%d)) = %d", n, pos, back)
				}
				if s != pos {
					moved++
				}
			}
			if !shuffle && moved != 0 {
				t.Fatalf("n=%d: the unshuffled order moved %d samples", n, moved)
			}
			if shuffle && n >= 100 && moved < int(n)/2 {
				t.Fatalf("n=%d: a shuffle left %d of %d samples in place", n, int(n)-moved, n)
			}
		}
	}
}

// TestPermutationIsUniform checks with chi-square that, over many seeds,
// every sample is equally likely at a given position and vice versa.
func TestPermutationIsUniform(t *testing.T) {
	for _, n := range []uint64{5, 10, 64, 100} {
		const trials = 20000
		first := make([]float64, n) // which sample lands at position 0
		last := make([]float64, n)  // where sample n-1 goes
		for seed := uint64(0); seed < trials; seed++ {
			p := NewPermutation(n, seed, 0, true)
			first[p.At(0)]++
			last[p.Position(n-1)]++
		}
		for name, counts := range map[string][]float64{"sample at position 0": first, "position of the last sample": last} {
			exp := float64(trials) / float64(n)
			chi := 0.0
			for _, c := range counts {
				chi += (c - exp) * (c - exp) / exp
			}
			// The 99.9% quantile of chi-square with k = n-1 degrees of freedom,
			// by Wilson–Hilferty.
			k := float64(n - 1)
			z := 3.09
			limit := k * math.Pow(1-2/(9*k)+z*math.Sqrt(2/(9*k)), 3)
			if chi > limit {
				t.Errorf("n=%d, %s: chi-square %.1f > %.1f", n, name, chi, limit)
			}
		}
	}
}

func TestEpochsAndSeedsDiffer(t *testing.T) {
	const n = 1000
	order := func(seed, epoch uint64) []uint64 {
		p := NewPermutation(n, seed, epoch, true)
		out := make([]uint64, n)
		for i := range out {
			out[i] = p.At(uint64(i))
		}
		return out
	}
	same := func(a, b []uint64) int {
		k := 0
		for i := range a {
			if a[i] == b[i] {
				k++
			}
		}
		return k
	}
	if k := same(order(1, 0), order(1, 1)); k > 20 {
		t.Fatalf("epochs 0 and 1 agree at %d of %d positions", k, n)
	}
	if k := same(order(1, 0), order(2, 0)); k > 20 {
		t.Fatalf("seeds 1 and 2 agree at %d of %d positions", k, n)
	}
	if k := same(order(7, 5), order(7, 5)); k != n {
		t.Fatal("the same seed and epoch gave different orders")
	}
}
