package manifest

import "testing"

func TestDecode(t *testing.T) {
	objs, err := Decode([]byte("---\napiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n# only a comment\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: b, namespace: a}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || objs[0].GetKind() != "Namespace" || objs[1].GetName() != "b" || objs[1].GetNamespace() != "a" {
		t.Errorf("decoded %v, want the Namespace a and the ServiceAccount a/b, empty documents skipped", objs)
	}
	if _, err := Decode([]byte("kind: [unclosed\n")); err == nil {
		t.Error("a malformed document decoded without an error")
	}
}
