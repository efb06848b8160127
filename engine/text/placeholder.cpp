// Removed once the tokenizer lands.
namespace tessera::text { void placeholder_text() {} }
