-- placeholder, replaced by the foundation schema
SELECT 1;
