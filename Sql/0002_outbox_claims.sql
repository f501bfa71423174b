-- 0002_outbox_claims: dispatcher claims on outbox rows as a lease (who, until when, which claim),
-- so a claim is a short transaction rather than a row lock held while APNs answers. A lock held
-- during the send would block every ingest of the event (its upsert of the same outbox row) for the
-- length of an APNs round trip; a lease column leaves ingest free, and a crashed (kill -9) or
-- partitioned instance's claim simply expires. The claim token tells a late writer whose claim
-- expired and was taken over that the row is no longer its own.
ALTER TABLE outbox
    ADD COLUMN claimed_by     text CONSTRAINT outbox_claimed_by_valid CHECK (claimed_by <> ''),
    ADD COLUMN claim_token    uuid,
    ADD COLUMN claimed_until  timestamptz,
    ADD CONSTRAINT outbox_claim_complete
        CHECK ((claimed_by IS NULL) = (claim_token IS NULL) AND (claim_token IS NULL) = (claimed_until IS NULL));

-- `marquee status` shows the last failed exchanges; without this index that query scans every
-- delivery (thousands a second under load) when there are few errors.
CREATE INDEX deliveries_failed ON deliveries (sent_at DESC) WHERE status IS NULL OR status >= 400;
