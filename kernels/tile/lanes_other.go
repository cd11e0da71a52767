//go:build !amd64 || purego

package tile

// lanesSIMD: no lane kernels on this platform or build.
func lanesSIMD(d int) bool { return false }

func lanesUpdateSIMD(l *Lanes, k, v []float32, n int) { lanesUpdateGeneric(l, k, v, n) }

func lanesUpdateStagedSIMD(l *Lanes, src Stager, n int) { panic("unreachable") }
