-- KEYS: changes, providers, consumers, groups [, instances, the instance's
-- deleted key]. ARGV: maxlen, consumer uuid [, the record check's uuid, states,
-- expected fields]. Returns 1 if the consumer held allocations, else 0; with a
-- check the record fails, RecordChanged (nothing written).
return release_consumer(ARGV[2])
