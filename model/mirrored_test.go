package model

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateMirrored = flag.Bool("update-mirrored", false, "rewrite mirrored.sha256 from the Go code (after reviewing the models)")

// funcSum is the sha256 of the Go function or method name (Name, or
// Recv.Name) in the file at path, as gofmt prints it without its doc
// comment, comments or blank lines: an edit elsewhere in the file, or to
// a comment, changes nothing.
func funcSum(path, name string) (string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		return "", err
	}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || funcName(fd) != name {
			continue
		}
		fd.Doc = nil
		var b bytes.Buffer
		if err := format.Node(&b, fset, fd); err != nil {
			return "", err
		}
		// Blank lines go too: a comment dropped from the body leaves one.
		var code []string
		for _, l := range strings.Split(b.String(), "\n") {
			if strings.TrimSpace(l) != "" {
				code = append(code, l)
			}
		}
		h := sha256.Sum256([]byte(strings.Join(code, "\n")))
		return hex.EncodeToString(h[:]), nil
	}
	return "", fmt.Errorf("no function %s in %s", name, path)
}

// funcName is fd's name, with its receiver's type for a method.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// TestGoMirrored fails when a Go function that zk.pml or etcd.pml mirrors
// (mirrored.sha256: sum, file, function) changed since the models were last
// reviewed against it. After the review: go test ./model -run
// TestGoMirrored -update-mirrored.
func TestGoMirrored(t *testing.T) {
	b, err := os.ReadFile("mirrored.sha256")
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(b))
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			out.WriteString(line + "\n")
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 3 {
			t.Fatalf("mirrored.sha256: bad line %q (want: sum file function)", line)
		}
		sum, path, name := fields[0], fields[1], fields[2]
		got, err := funcSum(filepath.Join("..", path), name)
		if err != nil {
			t.Errorf("%s %s: %v: review the model that names it (zk.pml, etcd.pml, controls.pml) and update model/mirrored.sha256", path, name, err)
			out.WriteString(line + "\n")
			continue
		}
		n++
		fmt.Fprintf(&out, "%s  %s  %s\n", got, path, name)
		if got != sum && !*updateMirrored {
			t.Errorf("%s %s changed (sha256 %s, mirrored.sha256 has %s): review the model that names it (zk.pml, etcd.pml, controls.pml), then go test ./model -run TestGoMirrored -update-mirrored",
				path, name, got, sum)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("mirrored.sha256 lists no function")
	}
	if *updateMirrored {
		if err := os.WriteFile("mirrored.sha256", []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFuncSumIgnoresCommentsAndDoc: the hash is of the code, so that a
// comment's edit does not ask for a model review, and a code edit does.
func TestFuncSumIgnoresCommentsAndDoc(t *testing.T) {
	dir := t.TempDir()
	write := func(src string) string {
		p := filepath.Join(dir, "f.go")
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := funcSum(p, "T.F")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	base := write("package p\n\ntype T struct{}\n\n// F does a.\nfunc (t *T) F() int {\n\treturn 1\n}\n")
	if s := write("package p\n\ntype T struct{}\n\n// F does b.\nfunc (t *T) F() int {\n\t// one\n\treturn 1\n}\n\nfunc G() {}\n"); s != base {
		t.Errorf("a doc comment, an inner comment and another function changed the sum")
	}
	if s := write("package p\n\ntype T struct{}\n\nfunc (t *T) F() int {\n\treturn 2\n}\n"); s == base {
		t.Errorf("a changed body kept the sum")
	}
	if _, err := funcSum(filepath.Join(dir, "f.go"), "F"); err == nil {
		t.Errorf("the method T.F was found as the function F")
	}
}
