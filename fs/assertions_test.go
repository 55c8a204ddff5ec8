package fs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryOperationAsserted: each go-fuse operation a node or handle of
// this package implements is asserted at compile time with
// var _ = (gofs.NodeX)((*T)(nil)). Without the assertion a signature that
// drifts from go-fuse's makes the method dead code, and go-fuse silently
// answers the operation with its default (a Flush that is never called
// reports success; a refusal becomes ENOTSUP or success).
func TestEveryOperationAsserted(t *testing.T) {
	nodeOps := map[string]string{
		"Access": "NodeAccesser", "Create": "NodeCreater", "Flush": "NodeFlusher", "Fsync": "NodeFsyncer",
		"Getattr": "NodeGetattrer", "Getxattr": "NodeGetxattrer", "Link": "NodeLinker", "Listxattr": "NodeListxattrer",
		"Lookup": "NodeLookuper", "Mkdir": "NodeMkdirer", "Mknod": "NodeMknoder", "OnAdd": "NodeOnAdder",
		"Open": "NodeOpener", "OpendirHandle": "NodeOpendirHandler", "Read": "NodeReader", "Readdir": "NodeReaddirer",
		"Readlink": "NodeReadlinker", "Release": "NodeReleaser", "Removexattr": "NodeRemovexattrer",
		"Rename": "NodeRenamer", "Rmdir": "NodeRmdirer", "Setattr": "NodeSetattrer", "Setxattr": "NodeSetxattrer",
		"Statfs": "NodeStatfser", "Symlink": "NodeSymlinker", "Unlink": "NodeUnlinker", "Write": "NodeWriter",
	}
	fileOps := map[string]string{
		"Flush": "FileFlusher", "Fsync": "FileFsyncer", "Getattr": "FileGetattrer", "Read": "FileReader",
		"Readdirent": "FileReaddirenter", "Release": "FileReleaser", "Releasedir": "FileReleasedirer",
		"Seekdir": "FileSeekdirer", "Setattr": "FileSetattrer", "Write": "FileWriter", "Lookup": "FileLookuper",
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	methods := map[string][]string{} // type -> operation methods
	asserted := map[[2]string]bool{} // {type, interface}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				if n.Recv != nil && len(n.Recv.List) == 1 {
					if star, ok := n.Recv.List[0].Type.(*ast.StarExpr); ok {
						if id, ok := star.X.(*ast.Ident); ok {
							methods[id.Name] = append(methods[id.Name], n.Name.Name)
						}
					}
				}
			case *ast.CallExpr:
				// (gofs.X)((*T)(nil))
				paren, ok := n.Fun.(*ast.ParenExpr)
				if !ok || len(n.Args) != 1 {
					return true
				}
				sel, ok := paren.X.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "gofs" {
					return true
				}
				conv, ok := n.Args[0].(*ast.CallExpr)
				if !ok {
					return true
				}
				p, ok := conv.Fun.(*ast.ParenExpr)
				if !ok {
					return true
				}
				if star, ok := p.X.(*ast.StarExpr); ok {
					if id, ok := star.X.(*ast.Ident); ok {
						asserted[[2]string{id.Name, sel.Sel.Name}] = true
					}
				}
			}
			return true
		})
	}
	isHandle := func(typ string) bool {
		for _, m := range methods[typ] {
			if m == "Readdirent" || m == "Releasedir" {
				return true
			}
		}
		return strings.HasSuffix(typ, "Handle") || strings.HasSuffix(strings.ToLower(typ), "handle")
	}
	checked := 0
	for typ, ms := range methods {
		ops := nodeOps
		if isHandle(typ) {
			ops = fileOps
		}
		for _, m := range ms {
			iface, ok := ops[m]
			if !ok {
				continue
			}
			checked++
			if !asserted[[2]string{typ, iface}] {
				t.Errorf("%s.%s: no var _ = (gofs.%s)((*%s)(nil))", typ, m, iface, typ)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked %d operations: the scan found too few to be right", checked)
	}
}
