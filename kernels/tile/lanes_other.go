//go:build !amd64 || purego

package tile

// lanesKernFor: no lane kernels on this platform or build.
func lanesKernFor(d int) lanesKern { return lanesGeneric }

func lanesUpdateSIMD(l *Lanes, k, v []float32, n int) { lanesUpdateGeneric(l, k, v, n) }

func lanesUpdateStagedSIMD(l *Lanes, src Stager, n int) { panic("unreachable") }
