// Package validate is the argument checking every entry point of package
// op reports through: the error types (ArgError, NotImplementedError,
// StalePlanError, ForwardOnlyError, which op exports under the same names
// as aliases, so errors.As with an *op.ArgError matches them), the Checker
// that keeps the first failure of a validation sequence, the tensor
// accessors validation needs (Dense views, dtypes, ranks, shapes, the
// low-precision tensor dtypes and their names), the rules of sequence
// metadata and outputs (cu_seqlens, max_seqlen, caller-owned output
// tensors), the rules of paged metadata shared by prefill and decode (page
// ids in range, the page table's key capacity, topK, the worker count) and
// the scalar rules (softmax scale, temperature, size caps) that give one
// value one answer in the eager functions, the graph constructors and ops,
// the wrappers and the CUDA path. It owns no attention semantics: it must
// not depend on package op or any other op/internal package, on Gorgonia's
// graph, or on the kernels beyond kernels/lowp's element types.
package validate
