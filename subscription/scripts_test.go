package subscription

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestScriptFieldsMatchTheStoredJSON holds the field names the scripts
// read (F) to the JSON that Create stores, and keeps literals out of the
// scripts.
func TestScriptFieldsMatchTheStoredJSON(t *testing.T) {
	data, err := json.Marshal(&Subscription{Version: 7})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if m[versionField] != float64(7) {
		t.Errorf("JSON field %q = %v; want the version, 7 (JSON: %s)", versionField, m[versionField], data)
	}
	for name, body := range map[string]string{"update": updateLua, "deleteVersion": deleteVersionLua} {
		if strings.Contains(body, `'`+versionField+`'`) || strings.Contains(body, `"`+versionField+`"`) {
			t.Errorf("%s script spells %q as a literal; want F.version", name, versionField)
		}
	}
}
