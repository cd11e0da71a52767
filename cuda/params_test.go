package cuda

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// cFields parses "typedef struct Name { ... } Name;" of msa_params.h into
// (C type, normalised field name) pairs in declaration order.
func cFields(t *testing.T, header, name string) [][2]string {
	t.Helper()
	re := regexp.MustCompile(`(?s)typedef struct ` + name + ` \{(.*?)\} ` + name + `;`)
	m := re.FindStringSubmatch(header)
	if m == nil {
		t.Fatalf("struct %s not found in msa_params.h", name)
	}
	body := regexp.MustCompile(`(?s)/\*.*?\*/`).ReplaceAllString(m[1], "")
	var out [][2]string
	for _, decl := range strings.Split(body, ";") {
		decl = strings.TrimSpace(decl)
		if decl == "" {
			continue
		}
		typ, rest, ok := strings.Cut(decl, " ")
		if !ok {
			t.Fatalf("%s: cannot parse %q", name, decl)
		}
		for _, f := range strings.Split(rest, ",") {
			out = append(out, [2]string{typ, strings.ReplaceAll(strings.TrimSpace(f), "_", "")})
		}
	}
	return out
}

// TestParamsLayout checks that the Go mirrors have the C structs' fields, in
// order, with matching types, and the same size (no implicit padding).
func TestParamsLayout(t *testing.T) {
	src, err := os.ReadFile("../kernels/cuda/shared/msa_params.h")
	if err != nil {
		t.Fatal(err)
	}
	goType := map[string]reflect.Kind{"uint64_t": reflect.Uint64, "int32_t": reflect.Int32, "float": reflect.Float32}
	size := map[string]uintptr{"uint64_t": 8, "int32_t": 4, "float": 4}
	for _, c := range []struct {
		cname string
		typ   reflect.Type
	}{
		{"MsaFwdParams", reflect.TypeOf(fwdKernelParams{})},
		{"MsaCombineParams", reflect.TypeOf(combineKernelParams{})},
		{"MsaDecodeParams", reflect.TypeOf(decodeKernelParams{})},
		{"MsaQFwdParams", reflect.TypeOf(qfwdKernelParams{})},
	} {
		fields := cFields(t, string(src), c.cname)
		if len(fields) != c.typ.NumField() {
			t.Fatalf("%s: %d C fields, %d Go fields", c.cname, len(fields), c.typ.NumField())
		}
		var off uintptr
		for i, f := range fields {
			gf := c.typ.Field(i)
			if !strings.EqualFold(gf.Name, f[1]) {
				t.Errorf("%s field %d: C %s, Go %s", c.cname, i, f[1], gf.Name)
			}
			if gf.Type.Kind() != goType[f[0]] {
				t.Errorf("%s.%s: C %s, Go %s", c.cname, gf.Name, f[0], gf.Type.Kind())
			}
			if gf.Offset != off {
				t.Errorf("%s.%s: Go offset %d, C offset %d", c.cname, gf.Name, gf.Offset, off)
			}
			off += size[f[0]]
		}
		if off%8 != 0 || c.typ.Size() != off {
			t.Errorf("%s: Go size %d, C size %d (must be a multiple of 8)", c.cname, c.typ.Size(), off)
		}
	}
}
