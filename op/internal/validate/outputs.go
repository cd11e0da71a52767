package validate

import (
	"fmt"
	"slices"

	"gorgonia.org/tensor"
)

// OutputArg records an error unless t is a contiguous tensor of dtype dt
// and exactly the given shape, whose storage is exactly that shape (a view
// into a larger tensor would be written outside the view).
func OutputArg(c *Checker, t *tensor.Dense, arg string, dt tensor.Dtype, shape ...int) {
	if c.Err != nil {
		return
	}
	n := 1
	for _, x := range shape {
		n *= x
	}
	if t == nil {
		c.Fail(arg, fmt.Sprintf("a contiguous %s tensor of shape %v", DtypeName(dt), slices.Clone(shape)), "nil")
		return
	}
	if t.Dtype() != dt || !ShapeIs(t, shape...) || t.RequiresIterator() || t.IsMaterializable() ||
		len(t.Header.Raw) != n*int(dt.Size()) {
		c.Fail(arg, fmt.Sprintf("a contiguous %s tensor of shape %v (not a view)", DtypeName(dt), slices.Clone(shape)),
			fmt.Sprintf("%s %v%s", DtypeName(t.Dtype()), []int(t.Shape()), viewDesc(t)))
	}
}

// viewDesc describes the view state of t for error messages.
func viewDesc(t *tensor.Dense) string {
	switch {
	case t.IsMaterializable():
		return " (a view)"
	case t.RequiresIterator():
		return " (not contiguous)"
	}
	return ""
}
