let migrationCount = embeddedMigrations.count
