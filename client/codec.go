package client

import (
	"encoding/json"
	"fmt"
	"mime"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Codec turns Go values into documents and back. A Dataset encodes puts and
// merge intents with its codec (JSON unless WithCodec says otherwise) and
// decodes what it reads with the codec of the document's content type.
type Codec interface {
	// ContentType is the media type of the documents the codec produces,
	// such as "application/json".
	ContentType() string
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// JSON is the encoding/json codec ("application/json"), the default.
var JSON Codec = jsonCodec{}

// BSON is the MongoDB driver's bson codec ("application/bson"). Values must
// encode to a BSON document (a struct, a map or a bson.D).
var BSON Codec = bsonCodec{}

type jsonCodec struct{}

func (jsonCodec) ContentType() string                { return "application/json" }
func (jsonCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

type bsonCodec struct{}

func (bsonCodec) ContentType() string                { return "application/bson" }
func (bsonCodec) Marshal(v any) ([]byte, error)      { return bson.Marshal(v) }
func (bsonCodec) Unmarshal(data []byte, v any) error { return bson.Unmarshal(data, v) }

// mediaType returns the lower-case type/subtype of a content type.
func mediaType(ct string) string {
	if mt, _, err := mime.ParseMediaType(ct); err == nil {
		return mt
	}
	return strings.ToLower(strings.TrimSpace(ct))
}

// codecFor picks the codec that decodes a document of content type ct:
// the preferred one when its type matches, else JSON or BSON.
func codecFor(preferred Codec, ct string) (Codec, error) {
	if preferred != nil && ct == preferred.ContentType() {
		return preferred, nil // the common case, without parsing
	}
	mt := mediaType(ct)
	if preferred != nil && mediaType(preferred.ContentType()) == mt {
		return preferred, nil
	}
	switch mt {
	case "application/json":
		return JSON, nil
	case "application/bson":
		return BSON, nil
	}
	return nil, fmt.Errorf("sink: no codec for content type %q", ct)
}
