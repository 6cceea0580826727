// Command health judges Kubernetes objects as GitOps tools do, and prints one JSON line per
// object read from stdin (one object, or a list as `kubectl get -o json` prints it):
//
//	{"name": ..., "kstatus": {"status", "message"}, "argocd": {"status", "message"}}
//
// kstatus is the status library of sigs.k8s.io/cli-utils, which Flux, kpt and cli-utils' apply
// use for any object (InProgress, Failed, Current, ...). argocd, with -argocd FILE, is an Argo CD
// health check in its resource-customization format run the way Argo CD runs one: in gopher-lua,
// the interpreter Argo CD embeds, with the object as the global `obj` and the returned table's
// status (Healthy, Progressing, Degraded, Suspended, ...) and message.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type judgement struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

type line struct {
	Name    string     `json:"name"`
	Kstatus judgement  `json:"kstatus"`
	Argocd  *judgement `json:"argocd,omitempty"`
}

func main() {
	argocd := flag.String("argocd", "", "an Argo CD health.lua to run on each object too")
	flag.Parse()
	if err := run(os.Stdin, os.Stdout, *argocd); err != nil {
		fmt.Fprintln(os.Stderr, "health:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer, argocd string) error {
	data, err := io.ReadAll(in)
	if err != nil {
		return fmt.Errorf("reading stdin: %w", err)
	}
	var script string
	if argocd != "" {
		read, err := os.ReadFile(argocd)
		if err != nil {
			return err
		}
		script = string(read)
	}
	var read unstructured.Unstructured
	if err := read.UnmarshalJSON(data); err != nil {
		return fmt.Errorf("stdin holds no Kubernetes object: %w", err)
	}
	objects := []unstructured.Unstructured{read}
	if read.IsList() {
		list, err := read.ToList()
		if err != nil {
			return fmt.Errorf("reading the list: %w", err)
		}
		objects = list.Items
	}
	for i := range objects {
		object := &objects[i]
		result, err := status.Compute(object)
		if err != nil {
			return fmt.Errorf("kstatus on %s: %w", object.GetName(), err)
		}
		judged := line{
			Name:    object.GetName(),
			Kstatus: judgement{Status: result.Status.String(), Message: result.Message},
		}
		if script != "" {
			health, err := argoHealth(script, object.Object)
			if err != nil {
				return fmt.Errorf("the Argo CD health check on %s: %w", object.GetName(), err)
			}
			judged.Argocd = &health
		}
		encoded, err := json.Marshal(judged)
		if err != nil {
			return err
		}
		fmt.Fprintln(out, string(encoded))
	}
	return nil
}

// argoHealth runs a health.lua as Argo CD does: `obj` set to the object, and the returned table
// read for its status and message.
func argoHealth(script string, object map[string]interface{}) (judgement, error) {
	state := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer state.Close()
	for _, open := range []struct {
		name string
		fn   lua.LGFunction
	}{{lua.LoadLibName, lua.OpenPackage}, {lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		state.Push(state.NewFunction(open.fn))
		state.Push(lua.LString(open.name))
		state.Call(1, 0)
	}
	state.SetGlobal("obj", toLua(state, object))
	if err := state.DoString(script); err != nil {
		return judgement{}, err
	}
	returned, ok := state.Get(-1).(*lua.LTable)
	if !ok {
		return judgement{}, fmt.Errorf("the script returned %s, not a table", state.Get(-1).Type())
	}
	return judgement{
		Status:  returned.RawGetString("status").String(),
		Message: returned.RawGetString("message").String(),
	}, nil
}

// toLua converts a decoded JSON value into Lua values: objects and arrays to tables (arrays from
// index 1), numbers, strings and booleans as themselves, null to nil.
func toLua(state *lua.LState, value interface{}) lua.LValue {
	switch v := value.(type) {
	case map[string]interface{}:
		table := state.NewTable()
		for key, item := range v {
			table.RawSetString(key, toLua(state, item))
		}
		return table
	case []interface{}:
		table := state.NewTable()
		for _, item := range v {
			table.Append(toLua(state, item))
		}
		return table
	case string:
		return lua.LString(v)
	case bool:
		return lua.LBool(v)
	case int64:
		return lua.LNumber(v)
	case float64:
		return lua.LNumber(v)
	case json.Number:
		f, _ := v.Float64()
		return lua.LNumber(f)
	default:
		return lua.LNil
	}
}
