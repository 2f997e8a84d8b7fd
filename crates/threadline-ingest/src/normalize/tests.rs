//! Tests of the LLM normalizer, one fixture per convention.
