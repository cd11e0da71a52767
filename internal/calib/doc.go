// Package calib measures the machine the kernels run on: the multiply-add
// peak of a CPU tier's calibration loop (PeakGFLOPS on the best window,
// SustainedGFLOPS over the whole interval, SumOnThreads for several workers
// at once) and the memory read bandwidth (ReadBandwidth). The bench and the
// kernels' rate tests divide by these figures; sub-package updatemeter adds
// the in-cache rate of a tile update.
//
// It owns the timing, not the loops: each tier's calibration kernel comes
// from tile.PeakLoop and is passed in as a Loop. It must not depend on any
// package of this module (kernels/tile's own tests import it, so an import
// of tile here would be a cycle) and nothing in the ops' call path may
// depend on it.
package calib
