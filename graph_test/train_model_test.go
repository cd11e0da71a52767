package graphtest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sparseattn/msa/op"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The training test: a one-layer float32 attention model learns a copy
// task that needs attention to a distant block, with Gorgonia's Adam
// solver, G.Grad and a TapeMachine.
//
// Task: each sequence of trainLen tokens holds filler tokens, a marker
// somewhere in its first three blocks followed by a payload token (one of
// trainPayloads values), and a query token at the last position. The
// target at the last position is the payload. The payload lies at least
// five blocks before the query's block, so a model that attends to its
// own block and the three before it (a fixed local window of trainTopK
// blocks) cannot do better than guessing: loss ln 8 = 2.08. The
// block-sparse model selects trainTopK blocks per query in the graph
// (BlockScores -> TopKBlocks with the query's own block always kept ->
// K2QCSR -> FwdSchedule), so it sees as many keys as the local model but
// can reach the payload's block once its projections learn to score it.
//
// Model: h_t = E[x_t] + P[x_{t-1}] (token and previous-token embeddings,
// so a key can know it follows a marker), q, k, v = h Wq, h Wk, h Wv
// (one head, D = trainD), O = SparseAttention(q, k, v) (causal),
// logits = O Wo at the last position of each sequence, loss = mean
// cross-entropy over the batch. Every step draws a fresh batch.
//
// Thresholds: with the committed seed the sparse model's loss (mean of
// the last 25 steps) is about 0.002 after 300 steps; over model seeds 1-6
// it ranged from 0.002 to 0.15, so trainLearnedLoss = 0.3 leaves a 2x
// margin. The local model stays at chance (2.10 to 2.13 over the same
// seeds).
const (
	trainVocab    = 16
	trainPayloads = 8 // tokens 0..7
	tokMarker     = 8
	tokQuery      = 9 // fillers are 10..15
	trainLen      = 64
	trainBlk      = 8
	trainTopK     = 4
	trainBatch    = 8
	trainModel    = 32
	trainD        = 16
	trainWorkers  = 2
	trainLR       = 0.005
)

// copyBatch draws one batch: token ids [batch*len], previous-token ids
// (-1 at each sequence start) and the payload of each sequence.
func copyBatch(rng *rand.Rand) (cur, prev []int, target []int) {
	n := trainBatch * trainLen
	cur, prev = make([]int, n), make([]int, n)
	target = make([]int, trainBatch)
	for b := 0; b < trainBatch; b++ {
		s := cur[b*trainLen : (b+1)*trainLen]
		for i := range s {
			s[i] = 10 + rng.IntN(trainVocab-10)
		}
		p := rng.IntN(3*trainBlk - 1) // marker in blocks 0..2, payload right after
		target[b] = rng.IntN(trainPayloads)
		s[p], s[p+1] = tokMarker, target[b]
		s[trainLen-1] = tokQuery
		for i := range s {
			prev[b*trainLen+i] = -1
			if i > 0 {
				prev[b*trainLen+i] = s[i-1]
			}
		}
	}
	return cur, prev, target
}

// oneHot returns a float32 [len(ids), width] one-hot tensor (a row of
// zeros for id -1).
func oneHot(ids []int, width int) *tensor.Dense {
	x := make([]float32, len(ids)*width)
	for i, id := range ids {
		if id >= 0 {
			x[i*width+id] = 1
		}
	}
	return tensor.New(tensor.WithShape(len(ids), width), tensor.WithBacking(x))
}

// copyModel is the graph of the model and its trainable weights.
type copyModel struct {
	g                *G.ExprGraph
	cur, prev, tgt   *G.Node // inputs: one-hot tokens, previous tokens, targets
	cost             *G.Node
	weights          G.Nodes
	vm               G.VM
	solver           G.Solver
	localQ2K         *tensor.Dense // fixed window selection (local model)
	curVal, prevVal  *tensor.Dense
	targetVal, lastV *tensor.Dense
}

// newCopyModel builds the model; local replaces the in-graph block
// selection by the fixed window of the query's block and the topK-1
// blocks before it.
func newCopyModel(t *testing.T, seed uint64, local bool) *copyModel {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 99))
	n := trainBatch * trainLen
	m := &copyModel{g: G.NewGraph()}
	g := m.g
	w := func(name string, rows, cols int, std float64) *G.Node {
		return G.NewMatrix(g, tensor.Float32, G.WithShape(rows, cols), G.WithName(name),
			G.WithValue(f32([]int{rows, cols}, randF32(rng, rows*cols, std))))
	}
	emb, pemb := w("E", trainVocab, trainModel, 1), w("P", trainVocab, trainModel, 1)
	wq, wk := w("Wq", trainModel, trainD, 0.1/math.Sqrt(trainModel)), w("Wk", trainModel, trainD, 0.1/math.Sqrt(trainModel))
	wv, wo := w("Wv", trainModel, trainD, 1/math.Sqrt(trainModel)), w("Wo", trainD, trainVocab, 1/math.Sqrt(trainD))
	m.weights = G.Nodes{emb, pemb, wq, wk, wv, wo}

	m.curVal, m.prevVal = oneHot(make([]int, n), trainVocab), oneHot(make([]int, n), trainVocab)
	m.targetVal = oneHot(make([]int, trainBatch), trainVocab)
	m.cur, m.prev = input(g, "cur", m.curVal), input(g, "prev", m.prevVal)
	m.tgt = input(g, "target", m.targetVal)
	lens := make([]int, trainBatch)
	last := make([]int, trainBatch)
	for b := range lens {
		lens[b] = trainLen
		last[b] = b*trainLen + trainLen - 1
	}
	cu := input(g, "cu", i32([]int{trainBatch + 1}, prefix(lens)))
	// sel [batch, n] picks the last position of each sequence.
	m.lastV = oneHot(last, n)
	sel := input(g, "sel", m.lastV)

	mm := func(a, b *G.Node) *G.Node {
		y, err := G.Mul(a, b)
		must(t, err)
		return y
	}
	h, err := G.Add(mm(m.cur, emb), mm(m.prev, pemb))
	must(t, err)
	heads := func(x *G.Node) *G.Node {
		y, err := G.Reshape(x, tensor.Shape{n, 1, trainD})
		must(t, err)
		return y
	}
	q, k, v := heads(mm(h, wq)), heads(mm(h, wk)), heads(mm(h, wv))
	var q2k *G.Node
	if local {
		m.localQ2K = localWindow()
		q2k = input(g, "q2k", m.localQ2K)
	} else {
		scores, err := op.BlockScores(q, k, cu, cu, op.BlkKV(trainBlk), op.MaxSeqlenK(trainLen), op.Causal(), op.Workers(trainWorkers))
		must(t, err)
		q2k, err = op.TopKBlocks(scores, op.TopK(trainTopK), op.KeepLast())
		must(t, err)
	}
	csr, err := op.K2QCSR(q2k, cu, cu, op.BlkKV(trainBlk), op.MaxSeqlenK(trainLen))
	must(t, err)
	sched, err := op.FwdSchedule(csr, cu, cu, op.QheadPerKV(1), op.Workers(trainWorkers))
	must(t, err)
	o, err := op.SparseAttention(q, k, v, csr, sched, cu, cu, op.Causal(), op.Workers(trainWorkers))
	must(t, err)
	o2, err := G.Reshape(o, tensor.Shape{n, trainD})
	must(t, err)
	logits := mm(mm(sel, o2), wo) // [batch, vocab]
	prob, err := G.SoftMax(logits)
	must(t, err)
	logp, err := G.Log(prob)
	must(t, err)
	picked, err := G.HadamardProd(logp, m.tgt)
	must(t, err)
	sum, err := G.Sum(picked)
	must(t, err)
	m.cost, err = G.Div(sum, G.NewConstant(float32(-trainBatch)))
	must(t, err)
	_, err = G.Grad(m.cost, m.weights...)
	must(t, err)
	m.vm = G.NewTapeMachine(g, G.BindDualValues(m.weights...))
	m.solver = G.NewAdamSolver(G.WithLearnRate(trainLR))
	return m
}

// localWindow returns q2k [1, n, topK] selecting each query's block and the
// topK-1 blocks before it (-1 where they do not exist).
func localWindow() *tensor.Dense {
	n := trainBatch * trainLen
	q2k := make([]int32, n*trainTopK)
	for i := 0; i < n; i++ {
		blk := (i % trainLen) / trainBlk
		for j := 0; j < trainTopK; j++ {
			q2k[i*trainTopK+j] = int32(blk - j)
			if blk-j < 0 {
				q2k[i*trainTopK+j] = -1
			}
		}
	}
	return i32([]int{1, n, trainTopK}, q2k)
}

// step runs one training step on a fresh batch and returns the loss.
func (m *copyModel) step(t *testing.T, rng *rand.Rand) float64 {
	t.Helper()
	cur, prev, target := copyBatch(rng)
	must(t, G.Let(m.cur, oneHot(cur, trainVocab)))
	must(t, G.Let(m.prev, oneHot(prev, trainVocab)))
	must(t, G.Let(m.tgt, oneHot(target, trainVocab)))
	must(t, m.vm.RunAll())
	loss := float64(m.cost.Value().Data().(float32))
	must(t, m.solver.Step(G.NodesToValueGrads(m.weights)))
	m.vm.Reset()
	return loss
}

// trainCopy runs steps and returns the mean loss of the last 25 steps.
func trainCopy(t *testing.T, local bool, steps int) float64 {
	t.Helper()
	m := newCopyModel(t, 1, local)
	defer m.vm.Close()
	rng := rand.New(rand.NewPCG(2, 3))
	var tail float64
	for s := 0; s < steps; s++ {
		l := m.step(t, rng)
		if math.IsNaN(l) {
			t.Fatalf("step %d: loss NaN", s)
		}
		if s >= steps-25 {
			tail += l / 25
		}
		if s%25 == 0 || s == steps-1 {
			t.Logf("local=%v step %d: loss %.4f", local, s, l)
		}
	}
	return tail
}

// Loss thresholds (mean of the last 25 steps): guessing the payload costs
// ln 8 = 2.08.
const (
	trainLearnedLoss = 0.3 // the sparse model must get below this
	trainLocalLoss   = 1.8 // the local-window model must stay above this
)

// TestTrainCopyTask trains the sparse model and the local-window model:
// the first learns the copy (loss < trainLearnedLoss), the second cannot
// (loss > trainLocalLoss). Both runs take about 3 s on two cores.
func TestTrainCopyTask(t *testing.T) {
	const steps = 300
	sparse := trainCopy(t, false, steps)
	local := trainCopy(t, true, steps)
	t.Logf("after %d Adam steps: sparse attention loss %.4f, local window loss %.4f (ln 8 = %.4f)", steps, sparse, local, math.Log(8))
	if !(sparse < trainLearnedLoss) {
		t.Errorf("sparse attention model: loss %.4f, want < %.2f", sparse, trainLearnedLoss)
	}
	if !(local > trainLocalLoss) {
		t.Errorf("local window model: loss %.4f, want > %.2f", local, trainLocalLoss)
	}
}
