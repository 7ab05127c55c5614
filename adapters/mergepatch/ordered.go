package mergepatch

// entry is one member of an ordered object: its name and value (raw JSON,
// or a raw BSON element).
type entry[V any] struct {
	key string
	val V
}

// ordered is an object that keeps its member order: setting an existing
// member keeps its position, new members are appended.
type ordered[V any] struct {
	list  []entry[V]
	index map[string]int
}

func newOrdered[V any]() *ordered[V] { return &ordered[V]{index: map[string]int{}} }

func (o *ordered[V]) set(key string, v V) {
	if i, ok := o.index[key]; ok {
		o.list[i].val = v
		return
	}
	o.index[key] = len(o.list)
	o.list = append(o.list, entry[V]{key: key, val: v})
}

func (o *ordered[V]) remove(key string) {
	i, ok := o.index[key]
	if !ok {
		return
	}
	o.list = append(o.list[:i], o.list[i+1:]...)
	delete(o.index, key)
	for j := i; j < len(o.list); j++ {
		o.index[o.list[j].key] = j
	}
}

func (o *ordered[V]) get(key string) (V, bool) {
	i, ok := o.index[key]
	if !ok {
		var zero V
		return zero, false
	}
	return o.list[i].val, true
}
