//go:build cuda

package cuda

// launchCache holds the launch choices of a launch family (decode,
// sparse prefill) by key: everything a choice depends on besides the
// per-call plan (operand addresses, shapes, dtypes, switches). A choice is
// made on first sight of its key and reused by every later call, so that a
// call of a seen key formats no message, encodes no tensor map and
// allocates nothing. The cache is cleared when it holds maxLaunchChoices
// keys (one per layer and shape seen, in practice far fewer).
type launchCache[K comparable, V any] struct{ m map[K]*V }

// maxLaunchChoices bounds a launchCache.
const maxLaunchChoices = 1024

// get returns the choice of key and whether it is new (zero: the caller
// makes it now).
func (c *launchCache[K, V]) get(key K) (v *V, fresh bool) {
	if v, ok := c.m[key]; ok {
		return v, false
	}
	if c.m == nil || len(c.m) >= maxLaunchChoices {
		c.m = map[K]*V{}
	}
	v = new(V)
	c.m[key] = v
	return v, true
}

// ownSteps returns copies of steps whose parameter blocks are the
// Prepared's own: the launch paths build steps over the Kernels' storage,
// which the next call rewrites.
func ownSteps(steps []step) []step {
	out := make([]step, len(steps))
	for i, st := range steps {
		st.value = append([]byte(nil), st.value...)
		out[i] = st
	}
	return out
}
