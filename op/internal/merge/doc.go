// Package merge is the arithmetic that combines partial attention results
// over disjoint key sets into the result over their union: each partial's
// weight from its natural-log LSE, the weighted sum of the O rows in
// float32 in a fixed source order, the merged LSE. MergeStatesFunc, the
// graph merge nodes and the context-parallel decode and prefill all merge
// through it, so one set of partials gives one result everywhere. It
// depends on kernels/lowp's element types only; it must not depend on
// package op, on the other op/internal packages, on the kernels'
// execution or on Gorgonia.
package merge
