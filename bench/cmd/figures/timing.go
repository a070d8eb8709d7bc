package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"time"
)

// timing is the library's default timing, in seconds.
type timing struct {
	ttl, drift, renew, margin, validity float64
}

// readTiming reads the default TTL and drift from the constants of the
// library's internal/durations/durations.go and evaluates what Derive
// derives from them (the renew interval, the margin, the validity), so
// that the picture follows the code.
func readTiming(path string) (timing, error) {
	file, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		return timing{}, err
	}
	env := map[string]float64{}
	for _, d := range file.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
			for _, s := range g.Specs {
				v := s.(*ast.ValueSpec)
				for i, name := range v.Names {
					if x, err := eval(v.Values[i], env); err == nil {
						env[name.Name] = x
					}
				}
			}
		}
	}
	env["c.TTL"], env["c.Drift"] = env["DefaultTTL"], env["DefaultDrift"]
	build := findFunc(file, "Derive")
	if build == nil {
		return timing{}, fmt.Errorf("%s: no func Derive", path)
	}
	for _, field := range []string{"c.RenewInterval", "c.Margin", "c.Validity"} {
		rhs := firstAssignment(build, field)
		if rhs == nil {
			return timing{}, fmt.Errorf("%s: Derive does not assign %s", path, field)
		}
		if env[field], err = eval(rhs, env); err != nil {
			return timing{}, fmt.Errorf("%s: %s: %w", path, field, err)
		}
	}
	s := float64(time.Second)
	return timing{ttl: env["c.TTL"] / s, drift: env["c.Drift"], renew: env["c.RenewInterval"] / s,
		margin: env["c.Margin"] / s, validity: env["c.Validity"] / s}, nil
}

func findFunc(f *ast.File, name string) *ast.FuncDecl {
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == name {
			return fn
		}
	}
	return nil
}

// firstAssignment returns the right-hand side of the first "field = x" in fn.
func firstAssignment(fn *ast.FuncDecl, field string) ast.Expr {
	var rhs ast.Expr
	ast.Inspect(fn, func(n ast.Node) bool {
		a, ok := n.(*ast.AssignStmt)
		if rhs != nil || !ok || len(a.Lhs) != 1 || len(a.Rhs) != 1 || a.Tok != token.ASSIGN {
			return rhs == nil
		}
		if name(a.Lhs[0]) == field {
			rhs = a.Rhs[0]
		}
		return rhs == nil
	})
	return rhs
}

func name(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return name(e.X) + "." + e.Sel.Name
	}
	return ""
}

var units = map[string]float64{"time.Nanosecond": 1, "time.Microsecond": 1e3, "time.Millisecond": 1e6,
	"time.Second": 1e9, "time.Minute": 60e9, "time.Hour": 3600e9}

// eval evaluates the arithmetic of a duration expression in nanoseconds
// (a plain number as itself): literals, time units, names in env, + - * /,
// max, min and conversions.
func eval(e ast.Expr, env map[string]float64) (float64, error) {
	switch e := e.(type) {
	case *ast.BasicLit:
		return strconv.ParseFloat(e.Value, 64)
	case *ast.ParenExpr:
		return eval(e.X, env)
	case *ast.Ident, *ast.SelectorExpr:
		n := name(e)
		if v, ok := units[n]; ok {
			return v, nil
		}
		if v, ok := env[n]; ok {
			return v, nil
		}
		return 0, fmt.Errorf("unknown name %s", n)
	case *ast.BinaryExpr:
		return binary(e, env)
	case *ast.CallExpr:
		return call(e, env)
	}
	return 0, fmt.Errorf("cannot evaluate %T", e)
}

func binary(e *ast.BinaryExpr, env map[string]float64) (float64, error) {
	x, err := eval(e.X, env)
	if err != nil {
		return 0, err
	}
	y, err := eval(e.Y, env)
	if err != nil {
		return 0, err
	}
	switch e.Op {
	case token.ADD:
		return x + y, nil
	case token.SUB:
		return x - y, nil
	case token.MUL:
		return x * y, nil
	case token.QUO:
		return x / y, nil
	}
	return 0, fmt.Errorf("cannot evaluate %v", e.Op)
}

func call(e *ast.CallExpr, env map[string]float64) (float64, error) {
	var args []float64
	for _, a := range e.Args {
		v, err := eval(a, env)
		if err != nil {
			return 0, err
		}
		args = append(args, v)
	}
	switch fn := name(e.Fun); {
	case fn == "max" && len(args) == 2:
		return max(args[0], args[1]), nil
	case fn == "min" && len(args) == 2:
		return min(args[0], args[1]), nil
	case (fn == "float64" || fn == "time.Duration") && len(args) == 1:
		return args[0], nil
	default:
		return 0, fmt.Errorf("cannot evaluate a call of %s", fn)
	}
}
