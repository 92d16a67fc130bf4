// Package decodeerr rewrites the errors of the YAML decoder in the words
// of the documents strata reads (recipes, agent configurations,
// inventories: keys, lines, kinds of values), so that no Go type or field
// name reaches an operator. manifests.Decode does the same for JSON.
package decodeerr
