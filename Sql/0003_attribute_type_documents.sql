-- 0003_attribute_type_documents: keep each attribute type's schema document as written.
--
-- jsonb sorts object keys, but a schema's field order is the order Marquee writes content-state keys in
-- (docs/schemas.md), so the canonical document is kept as text beside the jsonb columns. Rows written
-- before this migration have no document; readers fall back to the jsonb columns for them.
ALTER TABLE attribute_types
    ADD COLUMN document text CONSTRAINT attribute_types_document_valid
        CHECK (document IS NULL OR (document::jsonb ? 'contentState' AND document::jsonb ? 'attributes'));
