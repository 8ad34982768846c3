package events

// KindCtxTree is the stream of one CortexFS object tree, by its root path.
const KindCtxTree Kind = "ctxtree"

// ctxTreeEvents declares the ctxtree events (see declarations).
func ctxTreeEvents() []declaration {
	return []declaration{
		decl[CtxTreeInitialized](KindCtxTree),
		decl[CtxTreeObjectPut](KindCtxTree),
		decl[CtxTreeObjectRemoved](KindCtxTree),
		decl[CtxTreeAliasPut](KindCtxTree),
		decl[CtxTreeAliasRemoved](KindCtxTree),
	}
}

// CtxTreeInitialized creates a tree (or changes the runner its objects'
// shebangs name).
type CtxTreeInitialized struct {
	Runner string `json:"runner"`
}

const TypeCtxTreeInitialized = "ctxtree.initialized"

func (CtxTreeInitialized) EventType() string { return TypeCtxTreeInitialized }

// CtxTreeObjectPut registers or replaces an object. Object is the
// adapter's object record, kept opaque here.
type CtxTreeObjectPut struct {
	Rel    string  `json:"rel"`
	Object RawJSON `json:"object"`
}

const TypeCtxTreeObjectPut = "ctxtree.object_put"

func (CtxTreeObjectPut) EventType() string { return TypeCtxTreeObjectPut }

// CtxTreeObjectRemoved removes an object.
type CtxTreeObjectRemoved struct {
	Rel string `json:"rel"`
}

const TypeCtxTreeObjectRemoved = "ctxtree.object_removed"

func (CtxTreeObjectRemoved) EventType() string { return TypeCtxTreeObjectRemoved }

// CtxTreeAliasPut points an alias symlink at an object.
type CtxTreeAliasPut struct {
	Path  string  `json:"path"`
	Alias RawJSON `json:"alias"`
}

const TypeCtxTreeAliasPut = "ctxtree.alias_put"

func (CtxTreeAliasPut) EventType() string { return TypeCtxTreeAliasPut }

// CtxTreeAliasRemoved removes an alias.
type CtxTreeAliasRemoved struct {
	Path string `json:"path"`
}

const TypeCtxTreeAliasRemoved = "ctxtree.alias_removed"

func (CtxTreeAliasRemoved) EventType() string { return TypeCtxTreeAliasRemoved }
