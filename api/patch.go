package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/keyhook/keyhook/subscription"
)

// mergePatch applies the JSON merge patch (RFC 7396) body to cur and
// returns the result, not yet validated, with the errors of the read-only
// fields the patch names; or the problem to answer with. The patch is
// judged as a create body would be: unknown fields and wrong types are
// refused, each named. A key of null resets the field to its default.
func mergePatch(cur *subscription.Subscription, body []byte) (*subscription.Subscription, []subscription.FieldError, *problem) {
	// Syntax, shape and read-only keys first, on the patch as written.
	filtered, roErrs, p := checkPatch(body)
	if p != nil {
		return nil, nil, p
	}
	var patch any
	dec := json.NewDecoder(bytes.NewReader(filtered))
	dec.UseNumber() // numbers pass through untouched, so 1e40 is judged, not rounded
	if err := dec.Decode(&patch); err != nil {
		return nil, nil, syntaxProblem(err)
	}

	doc, err := toGeneric(cur)
	if err != nil {
		return nil, nil, newProblem(500, slugInternal, "the subscription could not be encoded")
	}
	for _, ro := range readOnlyFields {
		delete(doc, ro)
	}
	subType := reflect.TypeFor[subscription.Subscription]()
	merged := applyPatch(doc, patch, schemaOf(subType))
	mergedJSON, err := json.Marshal(merged)
	if err != nil {
		return nil, nil, newProblem(400, slugInvalidJSON, fmt.Sprintf("the patched subscription is not valid JSON: %v", err))
	}
	// Nulls left in the merged document sit inside arrays, which a patch
	// replaces whole: there they are values, and refused.
	mergedJSON, p = canonical(mergedJSON, subType)
	if p != nil {
		return nil, nil, p
	}
	var next subscription.Subscription
	dec = json.NewDecoder(bytes.NewReader(mergedJSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&next); err != nil {
		return nil, nil, decodeProblem(mergedJSON, subType, err)
	}
	next.ID, next.CreatedAt, next.UpdatedAt, next.Version = cur.ID, cur.CreatedAt, cur.UpdatedAt, cur.Version
	return &next, roErrs, nil
}

// checkPatch is decodeStrict's first half for a merge patch: one JSON
// object (a patch that is not one would replace the whole subscription),
// nothing after it, read-only keys taken out and reported.
func checkPatch(body []byte) ([]byte, []subscription.FieldError, *problem) {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 {
		return nil, nil, newProblem(400, slugInvalidJSON, "request body is empty")
	}
	if trimmed[0] != '{' {
		return nil, nil, newProblem(400, slugInvalidJSON, "a merge patch must be a JSON object")
	}
	return dropKeys(body, readOnlyFields)
}

func toGeneric(v any) (map[string]any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}

// applyPatch is RFC 7396's MergePatch. Patch keys that name a known field
// in another case are written under the field's own name, so that the
// patched value replaces the old one instead of racing it in the decoder.
func applyPatch(target, patch any, s *schema) any {
	pm, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	tm, ok := target.(map[string]any)
	if !ok {
		tm = make(map[string]any)
	}
	for k, v := range pm {
		var child *schema
		if s != nil && s.fields != nil {
			if name, c, known := s.lookup(k); known {
				k, child = name, c
			}
		}
		if v == nil {
			delete(tm, k)
			continue
		}
		tm[k] = applyPatch(tm[k], v, child)
	}
	return tm
}
