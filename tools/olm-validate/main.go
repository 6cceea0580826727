// Command olm-validate runs the official operator-framework validators
// (github.com/operator-framework/api/pkg/validation) on an OLM registry+v1 bundle directory, the
// same ones `operator-sdk bundle validate --select-optional suite=operatorframework` runs:
//
//   - the default bundle validators: bundle, ClusterServiceVersion, CustomResourceDefinition, and
//     the object validator for the other manifests (PodDisruptionBudget, RBAC);
//   - the operatorframework suite: OperatorHub (v2, standard capabilities and categories), good
//     practices, and deprecated APIs.
//
// Usage:
//
//	olm-validate [-k8s-version 1.31] BUNDLE_DIR
//
// It prints every error and warning, one a line, and exits 1 when any error is found, or any
// warning that is not in the allow-list below (each entry says why the warning stays), 2 on bad
// usage or a bundle that cannot be read.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/api/pkg/validation"
	"github.com/operator-framework/api/pkg/validation/errors"
	interfaces "github.com/operator-framework/api/pkg/validation/interfaces"
)

// allowedWarning is a warning that stays on purpose, with the reason.
type allowedWarning struct {
	// contains is matched against the warning's full text.
	contains string
	// why the warning stays instead of being fixed.
	why string
}

// allowedWarnings are the warnings that do not fail the run. Keep each one justified.
var allowedWarnings = []allowedWarning{
	{
		// The object validator flags any rule that may create or patch PodDisruptionBudgets.
		contains: "[policy] [poddisruptionbudgets] [] []}: RBAC includes permission to create/update poddisruptionbudgets",
		why: "the initializer-operator-workloads ClusterRole lets the operator give each initializer's " +
			"Deployment its own PodDisruptionBudget (maxUnavailable 1, so drains proceed); it is bound " +
			"by RoleBinding only in namespaces an administrator allowed, and the operator only touches " +
			"budgets that carry its label and an owner reference",
	},
}

// finding is one error or warning from one validator, in the form it is printed.
type finding struct {
	validator string
	warning   bool
	text      string
}

// verdict is how the run ends: what to print and whether it failed.
type verdict struct {
	lines  []string
	failed bool
}

// namedValidator pairs a validator with the name printed beside its findings.
type namedValidator struct {
	name      string
	validator interfaces.Validator
	// objects selects what the validator is given.
	objects func(b *manifests.Bundle, optional map[string]string) []interface{}
}

// bundleOnly hands the validator the bundle itself.
func bundleOnly(b *manifests.Bundle, _ map[string]string) []interface{} {
	return []interface{}{b}
}

// csvOnly hands the validator the ClusterServiceVersion.
func csvOnly(b *manifests.Bundle, _ map[string]string) []interface{} {
	if b.CSV == nil {
		return nil
	}
	return []interface{}{b.CSV}
}

// crdsOnly hands the validator every CustomResourceDefinition, all versions together.
func crdsOnly(b *manifests.Bundle, _ map[string]string) []interface{} {
	var objs []interface{}
	for _, crd := range b.V1beta1CRDs {
		objs = append(objs, crd)
	}
	for _, crd := range b.V1CRDs {
		objs = append(objs, crd)
	}
	return objs
}

// otherObjects hands the validator the manifests that are neither CSV nor CRD.
func otherObjects(b *manifests.Bundle, _ map[string]string) []interface{} {
	var objs []interface{}
	for _, obj := range b.Objects {
		kind := obj.GetKind()
		if kind == "ClusterServiceVersion" || kind == "CustomResourceDefinition" {
			continue
		}
		objs = append(objs, obj)
	}
	return objs
}

// optionalSuite hands the validator what operator-sdk gives its optional validators: the
// bundle's objects to validate, every manifest, and the optional values (k8s-version).
func optionalSuite(b *manifests.Bundle, optional map[string]string) []interface{} {
	objs := b.ObjectsToValidate()
	for _, obj := range b.Objects {
		objs = append(objs, obj)
	}
	return append(objs, optional)
}

// validators is every validator run, in order.
var validators = []namedValidator{
	{"bundle", validation.BundleValidator, bundleOnly},
	{"csv", validation.ClusterServiceVersionValidator, csvOnly},
	{"crd", validation.CustomResourceDefinitionValidator, crdsOnly},
	{"object", validation.ObjectValidator, otherObjects},
	{"operatorhub", validation.OperatorHubV2Validator, optionalSuite},
	{"standardcapabilities", validation.StandardCapabilitiesValidator, optionalSuite},
	{"standardcategories", validation.StandardCategoriesValidator, optionalSuite},
	{"good-practices", validation.GoodPracticesValidator, optionalSuite},
	{"alpha-deprecated-apis", validation.AlphaDeprecatedAPIsValidator, optionalSuite},
}

// collect turns validator results into findings.
func collect(name string, results []errors.ManifestResult) []finding {
	var found []finding
	for _, result := range results {
		for _, e := range result.Errors {
			found = append(found, finding{validator: name, text: e.Error()})
		}
		for _, w := range result.Warnings {
			found = append(found, finding{validator: name, warning: true, text: w.Error()})
		}
	}
	return found
}

// allowedBy returns the allow-list entry that covers a warning, if any.
func allowedBy(text string, allow []allowedWarning) (allowedWarning, bool) {
	for _, a := range allow {
		if strings.Contains(text, a.contains) {
			return a, true
		}
	}
	return allowedWarning{}, false
}

// judge decides the outcome: any error fails, any warning outside the allow-list fails.
func judge(found []finding, allow []allowedWarning) verdict {
	sorted := append([]finding(nil), found...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].warning != sorted[j].warning {
			return !sorted[i].warning
		}
		return false
	})
	var v verdict
	errorsSeen, warningsFailing, warningsAllowed := 0, 0, 0
	for _, f := range sorted {
		switch {
		case !f.warning:
			errorsSeen++
			v.lines = append(v.lines, fmt.Sprintf("ERROR   [%s] %s", f.validator, f.text))
		default:
			if a, ok := allowedBy(f.text, allow); ok {
				warningsAllowed++
				v.lines = append(v.lines, fmt.Sprintf("ALLOWED [%s] %s (allowed: %s)", f.validator, f.text, a.why))
			} else {
				warningsFailing++
				v.lines = append(v.lines, fmt.Sprintf("WARNING [%s] %s", f.validator, f.text))
			}
		}
	}
	v.failed = errorsSeen > 0 || warningsFailing > 0
	v.lines = append(v.lines, fmt.Sprintf("%d error(s), %d warning(s) not allowed, %d allowed warning(s)",
		errorsSeen, warningsFailing, warningsAllowed))
	return v
}

// run validates the bundle named on the command line and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("olm-validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	k8sVersion := fs.String("k8s-version", "",
		"the Kubernetes version the bundle targets, for the deprecated-API checks (default: the CSV's minKubeVersion)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: olm-validate [-k8s-version X.Y] BUNDLE_DIR")
		return 2
	}
	dir := fs.Arg(0)
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		fmt.Fprintf(stderr, "failed to read bundle: %s is not a directory\n", dir)
		return 2
	}
	// The bundle root, not manifests/: the loader then also reads metadata/annotations.yaml
	// (package and channels, which the good-practices channel check needs).
	bundle, err := manifests.GetBundleFromDir(dir)
	if err != nil {
		fmt.Fprintf(stderr, "failed to load bundle %s: %v\n", dir, err)
		return 2
	}
	optional := map[string]string{}
	if *k8sVersion != "" {
		optional["k8s-version"] = *k8sVersion
	}
	var found []finding
	for _, nv := range validators {
		objs := nv.objects(bundle, optional)
		if len(objs) == 0 {
			continue
		}
		found = append(found, collect(nv.name, nv.validator.Validate(objs...))...)
	}
	v := judge(found, allowedWarnings)
	for _, line := range v.lines {
		fmt.Fprintln(stdout, line)
	}
	if v.failed {
		return 1
	}
	return 0
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
